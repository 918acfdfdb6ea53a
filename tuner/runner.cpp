#include "tuner/runner.hpp"

#include <fmt/format.h>

namespace ktune::tuner {

void check_results(const templates::Workload& workload, const std::vector<std::vector<std::byte>>& results,
                   RunResult& result) {
  result.errors.clear();
  result.max_error = 0;
  std::string worst;
  for (std::size_t i = 0; i < workload.buffers.size(); ++i) {
    const auto& b = workload.buffers[i];
    if (b.role != templates::Role::kOutput && b.role != templates::Role::kInOut) continue;
    const double e = templates::relative_l2(b.dtype, results.at(i), b.expected);
    result.errors.emplace_back(b.name, e);
    const bool pass = e <= b.tolerance;  // NaN/Inf compare false
    if (!pass && worst.empty())
      worst = fmt::format("validation: {} relative L2 error {:.3g} > {:.1g}", b.name, e, b.tolerance);
    if (!(e <= result.max_error)) result.max_error = e;
  }
  result.ok = worst.empty();
  result.failure = worst;
}

}  // namespace ktune::tuner
