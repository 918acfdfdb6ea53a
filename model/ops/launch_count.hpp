// What a device backend's ops handed to the execution seam: kernel launches
// (per family) and GEMM calls, counted where DeviceOps enqueues them, so that
// "launches per step" is what ran, not an estimate. Eager and compiled mode
// differ mostly here: a fused kernel is one launch, its eager chain several.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include <fmt/format.h>

namespace ktune::model {

struct LaunchCount {
  std::int64_t kernels = 0;                       ///< kernel launches (family kernels and chain steps)
  std::int64_t gemms = 0;                         ///< GEMM calls (cuBLASLt matmuls; OpenBLAS under emulation)
  std::map<std::string, std::int64_t> by_family;  ///< kernel launches per family name

  /// The launches made after `earlier` (an earlier reading of the same counter).
  LaunchCount since(const LaunchCount& earlier) const {
    LaunchCount d{kernels - earlier.kernels, gemms - earlier.gemms, {}};
    for (const auto& [name, n] : by_family) {
      const auto it = earlier.by_family.find(name);
      const std::int64_t before = it == earlier.by_family.end() ? 0 : it->second;
      if (n > before) d.by_family[name] = n - before;
    }
    return d;
  }
  LaunchCount& operator+=(const LaunchCount& more) {
    kernels += more.kernels;
    gemms += more.gemms;
    for (const auto& [name, n] : more.by_family) by_family[name] += n;
    return *this;
  }
  std::int64_t total() const { return kernels + gemms; }
  /// "412 kernels + 96 GEMMs".
  std::string str() const { return fmt::format("{} kernels + {} GEMMs", kernels, gemms); }
};

}  // namespace ktune::model
