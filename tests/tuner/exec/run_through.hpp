// A family's workload run through an execution backend, for the seam's tests
// on both backends: buffers allocated, inputs uploaded, outputs poisoned,
// the plan launched, results checked against the CPU reference.
#pragma once
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "templates/family.hpp"
#include "tuner/exec/backend.hpp"

namespace ktune::test {

/// Runs `config` of `family` on a fresh workload through `backend`, outputs
/// poisoned first; returns the worst relative L2 error against the reference.
inline double run_through(tuner::exec::Backend& backend, const templates::Family& family, const Config& config,
                          const templates::Problem& problem, const tuner::exec::Module& module) {
  const auto w = family.make_workload(problem, 7);
  std::vector<std::unique_ptr<tuner::exec::Buffer>> buffers;
  std::vector<std::uint64_t> addresses;
  for (const auto& b : w.buffers) {
    buffers.push_back(backend.allocate(b.bytes.size(), b.name));
    addresses.push_back(buffers.back()->address());
    if (b.role == templates::Role::kOutput)
      backend.poison(*buffers.back());
    else
      backend.upload(*buffers.back(), b.bytes.data(), b.bytes.size());
  }
  backend.launch(module, family.plan(config, problem, addresses, backend.device()));
  backend.synchronize();
  double worst = 0;
  for (std::size_t i = 0; i < w.buffers.size(); ++i) {
    const auto& b = w.buffers[i];
    if (b.role != templates::Role::kOutput && b.role != templates::Role::kInOut) continue;
    std::vector<std::byte> got(b.bytes.size());
    backend.download(got.data(), *buffers[i], got.size());
    const double e = templates::relative_l2(b.dtype, got, b.expected);
    INFO(b.name << " error " << e);
    CHECK(e <= b.tolerance);
    worst = std::max(worst, e);
  }
  return worst;
}

/// A family's plan captured as a graph on `backend` and replayed, for the
/// graph tests of both backends: the capture runs nothing (the outputs stay
/// poisoned); a replay gives the reference; inputs uploaded anew and replayed
/// again give the new workload's reference (a graph reads its memory as it is
/// then, not as it was at capture); the graph holds a node per launch.
/// `family` must have no in-out buffers.
inline void graph_through(tuner::exec::Backend& backend, const templates::Family& family, const Config& config,
                                 const templates::Problem& problem, const tuner::exec::Module& module) {
  auto w = family.make_workload(problem, 7);
  std::vector<std::unique_ptr<tuner::exec::Buffer>> buffers;
  std::vector<std::uint64_t> addresses;
  for (const auto& b : w.buffers) {
    REQUIRE(b.role != templates::Role::kInOut);
    buffers.push_back(backend.allocate(b.bytes.size(), b.name));
    addresses.push_back(buffers.back()->address());
  }
  const auto fill = [&] {
    for (std::size_t i = 0; i < w.buffers.size(); ++i)
      if (w.buffers[i].role == templates::Role::kInput)
        backend.upload(*buffers[i], w.buffers[i].bytes.data(), w.buffers[i].bytes.size());
      else
        backend.poison(*buffers[i]);
    backend.synchronize();
  };
  // The worst output's relative L2 error over its tolerance; +inf where one
  // is still poisoned.
  const auto worst_error = [&] {
    backend.synchronize();
    double worst = 0;
    for (std::size_t i = 0; i < w.buffers.size(); ++i) {
      const auto& b = w.buffers[i];
      if (b.role != templates::Role::kOutput) continue;
      std::vector<std::byte> got(b.bytes.size());
      backend.download(got.data(), *buffers[i], got.size());
      worst = std::max(worst, templates::relative_l2(b.dtype, got, b.expected) / b.tolerance);
    }
    return worst;
  };
  fill();
  const auto plan = family.plan(config, problem, addresses, backend.device());
  const auto graph = backend.capture([&] { backend.launch(module, plan); });
  CHECK(graph->nodes() == plan.size());
  CHECK(std::isinf(worst_error()));  // captured, not run
  backend.replay(*graph);
  CHECK(worst_error() <= 1);
  w = family.make_workload(problem, 8);
  fill();
  CHECK(std::isinf(worst_error()));
  backend.replay(*graph);
  CHECK(worst_error() <= 1);
}

}  // namespace ktune::test
