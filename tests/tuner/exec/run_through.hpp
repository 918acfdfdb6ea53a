// A family's workload run through an execution backend, for the seam's tests
// on both backends: buffers allocated, inputs uploaded, outputs poisoned,
// the plan launched, results checked against the CPU reference.
#pragma once
#include <catch2/catch.hpp>

#include <algorithm>
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


}  // namespace ktune::test
