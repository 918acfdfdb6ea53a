// The one fit check (tuner/exec/backend.hpp): launch geometry and the
// compiler's resource report against the device's limits, through the
// static pruning rules of search/pruning.hpp.
#include <fmt/format.h>

#include <utility>

#include "tuner/exec/backend.hpp"

namespace ktune::tuner::exec {

FitResult check_fit(const std::vector<std::string>& kernel_names, const std::vector<KernelResources>& resources,
                    const std::vector<templates::Launch>& plan, const DeviceLimits& device) {
  FitResult worst;
  for (const auto& l : plan) {
    FitResult r;
    const auto k = static_cast<std::size_t>(l.kernel);
    if (l.kernel < 0 || k >= kernel_names.size()) {
      r.verdict.verdict = search::Verdict::kPruned;
      r.verdict.reason = fmt::format("the plan names kernel {}; the source has {}", l.kernel, kernel_names.size());
      return r;
    }
    r.kernel = kernel_names[k];
    search::ResourceUsage usage;
    usage.threads_per_block = static_cast<int>(l.block[0] * l.block[1] * l.block[2]);
    usage.dynamic_shared_bytes = l.dynamic_smem;
    if (k < resources.size()) {
      usage.registers_per_thread = resources[k].registers;
      usage.spill_bytes = resources[k].spill_bytes();
      usage.static_shared_bytes = resources[k].static_smem_bytes;
    }
    r.verdict = search::prune(usage, device);
    if (!r.fits()) return r;
    // The worst of the fitting launches: a spilling one first, then the lowest occupancy.
    const auto rank = [](const FitResult& f) {
      return std::make_pair(f.verdict.verdict == search::Verdict::kRankLast ? 0 : 1, f.verdict.occupancy);
    };
    if (worst.kernel.empty() || rank(r) < rank(worst)) worst = r;
  }
  return worst;
}

}  // namespace ktune::tuner::exec
