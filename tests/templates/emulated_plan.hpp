// A family's plan run emulated on its own workload, for the tests the
// every-family run cannot do: buffers given in place of others (aliasing, a
// kernel working in place), and a deliberately broken edit of the rendered
// source, which must fail the same comparison the real source passes.
#pragma once
#include <catch2/catch.hpp>
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "templates/family.hpp"
#include "tuner/emu/memory.hpp"
#include "tuner/emu/module.hpp"
#include "tuner/emu_launch.hpp"
#include "tuner/run/emu_runner.hpp"

namespace ktune::test {

/// The contents of each output (and in-out) buffer of workload `w`, by its
/// index, after `family`'s plan for `config` ran emulated from `rendered` on
/// `workers` OS threads. `alias` maps a buffer's index to the index of the
/// buffer whose address it is given (an output written in place of an
/// input: its result is read from there). Outputs are poisoned (NaN) first.
/// Each buffer's data starts `shift` bytes past its (16-byte aligned)
/// allocation: 4 leaves no operand aligned for 16-byte vectors.
inline std::map<std::size_t, std::vector<std::byte>> emulated_outputs(
    const templates::Family& family, const templates::Workload& w, const templates::Rendered& rendered,
    const Config& config, const templates::Problem& problem, const std::map<std::size_t, std::size_t>& alias = {},
    unsigned workers = 1, std::size_t shift = 0) {
  std::vector<std::unique_ptr<tuner::emu::GuardedBuffer>> buffers;
  std::vector<std::uint64_t> addresses;
  for (const auto& hb : w.buffers) {
    auto& b = buffers.emplace_back(std::make_unique<tuner::emu::GuardedBuffer>(hb.name, shift + hb.bytes.size()));
    b->fill(0xff);
    if (hb.role != templates::Role::kOutput) std::memcpy(b->data() + shift, hb.bytes.data(), hb.bytes.size());
    addresses.push_back(reinterpret_cast<std::uint64_t>(b->data() + shift));
  }
  for (const auto& [from, to] : alias) addresses.at(from) = addresses.at(to);
  const auto module = tuner::emu::load_module(rendered);
  auto launches = family.plan(config, problem, addresses, tuner::EmuRunner().device());
  run_emulated(*module, launches, buffers, workers);
  std::map<std::size_t, std::vector<std::byte>> outputs;
  for (std::size_t i = 0; i < w.buffers.size(); ++i) {
    const auto& hb = w.buffers[i];
    if (hb.role != templates::Role::kOutput && hb.role != templates::Role::kInOut) continue;
    const auto& b = *buffers[alias.count(i) ? alias.at(i) : i];
    outputs[i] = std::vector<std::byte>(b.data() + shift, b.data() + b.size());
  }
  return outputs;
}

/// The relative L2 error of each output (and in-out) buffer of `family`'s
/// workload (`seed`), by name, after emulated_outputs' run.
inline std::map<std::string, double> emulated_errors(const templates::Family& family,
                                                     const templates::Rendered& rendered, const Config& config,
                                                     const templates::Problem& problem, std::uint64_t seed,
                                                     const std::map<std::size_t, std::size_t>& alias = {},
                                                     unsigned workers = 1, std::size_t shift = 0) {
  const templates::Workload w = family.make_workload(problem, seed);
  std::map<std::string, double> errors;
  for (const auto& [i, got] : emulated_outputs(family, w, rendered, config, problem, alias, workers, shift))
    errors[w.buffers[i].name] = templates::relative_l2(w.buffers[i].dtype, got, w.buffers[i].expected);
  return errors;
}

/// Whether every output of `family`'s workload (`seed`) passes the family's
/// own check (its tolerance, or its atol as an RMS error: what a run
/// reports) after its plan for `config` ran emulated from `rendered`.
inline bool emulated_check_passes(const templates::Family& family, const templates::Rendered& rendered,
                                  const Config& config, const templates::Problem& problem, std::uint64_t seed) {
  const templates::Workload w = family.make_workload(problem, seed);
  bool passes = true;
  for (const auto& [i, got] : emulated_outputs(family, w, rendered, config, problem)) {
    const auto& b = w.buffers[i];
    const double relative = templates::relative_l2(b.dtype, got, b.expected);
    const bool ok = templates::within_tolerance(b, got, relative);
    UNSCOPED_INFO(b.name << (ok ? " passes: " : " fails: ") << templates::mismatch(b, got, relative));
    passes = passes && ok;
  }
  return passes;
}

/// Checks every output of emulated_errors against its dtype's tolerance.
inline void check_emulated_plan(const templates::Family& family, const Config& config,
                                const templates::Problem& problem, const std::map<std::size_t, std::size_t>& alias = {},
                                unsigned workers = 1, std::size_t shift = 0) {
  INFO(family.name() << " " << problem.key() << " " << config.str() << " shift " << shift);
  const templates::Workload w = family.make_workload(problem, 13);
  for (const auto& [name, error] : emulated_errors(family, family.render(config, problem), config, problem, 13, alias,
                                                   workers, shift)) {
    double tolerance = 0;
    for (const auto& b : w.buffers)
      if (b.name == name) tolerance = b.tolerance;
    INFO(name << " error " << error);
    CHECK(error <= tolerance);
  }
}

/// `rendered` with its one occurrence of `from` replaced by `to`: a broken
/// variant of a kernel.
inline templates::Rendered broken(templates::Rendered rendered, const std::string& from, const std::string& to) {
  const auto at = rendered.source.find(from);
  REQUIRE(at != std::string::npos);
  REQUIRE(rendered.source.find(from, at + 1) == std::string::npos);
  rendered.source.replace(at, from.size(), to);
  return rendered;
}

/// The largest output error of `family`'s plan run from the broken variant:
/// a test of the kernel must see it over the tolerance.
inline double broken_error(const templates::Family& family, const Config& config, const templates::Problem& problem,
                           const std::string& from, const std::string& to, std::size_t shift = 0) {
  double worst = 0;
  for (const auto& [name, error] :
       emulated_errors(family, broken(family.render(config, problem), from, to), config, problem, 13, {}, 1, shift))
    worst = std::max(worst, error);  // relative_l2 is +inf for NaN
  return worst;
}

}  // namespace ktune::test
