// Emulated runs for the families' own tests: a non-default config checked
// against the reference through the emulation runner, and a family's launch
// plan run on caller-made buffers, for what the runner's own workloads never
// do (misaligned pointers, aliased buffers, a forced grid, a chosen number of
// workers).
#pragma once
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "templates/family.hpp"
#include "tuner/emu/grid.hpp"
#include "tuner/emu/memory.hpp"
#include "tuner/emu/module.hpp"
#include "tuner/run/emu_runner.hpp"

namespace ktune::test {

/// Runs `config` (valid, and not the default: the every-family test covers
/// that) emulated and checks each of the `outputs` output buffers against the
/// reference within its dtype's tolerance.
inline void check_emulated_matches_reference(const templates::Family& f, const Config& config,
                                             const templates::Problem& p, std::size_t outputs) {
  tuner::EmuRunner runner;
  INFO(f.name() << " " << p.key() << " " << config.str());
  std::string why;
  REQUIRE(f.is_valid(config, p, runner.device(), &why));
  REQUIRE(config != f.default_config(p));
  tuner::RunOptions options;
  options.seed = 11;
  const auto r = runner.run(f, config, p, options);
  INFO(r.failure);
  CHECK(r.ok);
  const templates::Workload w = f.make_workload(p, options.seed);
  std::size_t checked = 0;
  for (const auto& [name, error] : r.errors)
    for (const auto& b : w.buffers)
      if (b.name == name) {
        INFO(name << " error " << error);
        CHECK(error <= b.tolerance);  // the runner's rule: an exact output has tolerance 0
        ++checked;
      }
  CHECK(checked == outputs);
}

/// Runs every launch of `launches` from `module`, in order, on `workers` OS
/// threads; `buffers` are the regions the kernels may touch.
inline void run_emulated(const tuner::emu::Module& module, std::vector<templates::Launch>& launches,
                         const std::vector<std::unique_ptr<tuner::emu::GuardedBuffer>>& buffers, unsigned workers) {
  tuner::emu::GridExecutor executor(workers);
  for (auto& l : launches) {
    auto args = l.args.pointers();
    tuner::emu::GridLaunch g;
    g.module = &module;
    g.kernel = l.kernel;
    g.grid = l.grid;
    g.block = l.block;
    g.dynamic_smem = l.dynamic_smem;
    g.args = args.data();
    for (const auto& b : buffers) g.regions.push_back(&b->region());
    executor.run(g);
  }
}

}  // namespace ktune::test
