#include "base/device_limits.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"

namespace ktune {

DeviceLimits DeviceLimits::for_arch(const std::string& arch) {
  DeviceLimits d;
  d.arch = arch;
  if (arch == "sm_80") {  // A100
    d.sm = 80, d.sm_count = 108, d.max_smem_per_block = 163 * 1024, d.smem_per_sm = 164 * 1024;
    d.l2_bytes = 40LL << 20;
  } else if (arch == "sm_86") {  // RTX 30xx, A10, A40
    d.sm = 86, d.sm_count = 84, d.max_smem_per_block = 99 * 1024, d.smem_per_sm = 100 * 1024;
    d.max_threads_per_sm = 1536, d.max_blocks_per_sm = 16, d.l2_bytes = 6LL << 20;
  } else if (arch == "sm_89") {  // L4, L40, RTX 40xx
    d.sm = 89, d.sm_count = 142, d.max_smem_per_block = 99 * 1024, d.smem_per_sm = 100 * 1024;
    d.max_threads_per_sm = 1536, d.max_blocks_per_sm = 24, d.l2_bytes = 96LL << 20;
  } else if (arch == "sm_90" || arch == "sm_90a") {  // H100 SXM
    d.sm = 90;
  } else {
    throw_error(ErrorKind::kInvalidInput,
                fmt::format("unknown architecture '{}'; accepted: {}", arch, fmt::join(known_archs(), ", ")));
  }
  return d;
}

std::vector<std::string> DeviceLimits::known_archs() { return {"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"}; }

nlohmann::json DeviceLimits::to_json() const {
  return {{"name", name},
          {"driver_version", driver_version},
          {"arch", arch},
          {"sm", sm},
          {"sm_count", sm_count},
          {"warp_size", warp_size},
          {"max_threads_per_block", max_threads_per_block},
          {"max_threads_per_sm", max_threads_per_sm},
          {"max_blocks_per_sm", max_blocks_per_sm},
          {"regs_per_sm", regs_per_sm},
          {"max_regs_per_thread", max_regs_per_thread},
          {"reg_alloc_unit", reg_alloc_unit},
          {"max_static_smem", max_static_smem},
          {"max_smem_per_block", max_smem_per_block},
          {"smem_per_sm", smem_per_sm},
          {"smem_reserved_per_block", smem_reserved_per_block},
          {"smem_alloc_unit", smem_alloc_unit},
          {"l2_bytes", l2_bytes},
          {"peak_bandwidth_gbs", peak_bandwidth_gbs}};
}

DeviceLimits DeviceLimits::from_json(const nlohmann::json& j) {
  DeviceLimits d;
  d.name = j.at("name").get<std::string>();
  d.driver_version = j.at("driver_version").get<int>();
  d.arch = j.at("arch").get<std::string>();
  d.sm = j.at("sm").get<int>();
  d.sm_count = j.at("sm_count").get<int>();
  d.warp_size = j.at("warp_size").get<int>();
  d.max_threads_per_block = j.at("max_threads_per_block").get<int>();
  d.max_threads_per_sm = j.at("max_threads_per_sm").get<int>();
  d.max_blocks_per_sm = j.at("max_blocks_per_sm").get<int>();
  d.regs_per_sm = j.at("regs_per_sm").get<int>();
  d.max_regs_per_thread = j.at("max_regs_per_thread").get<int>();
  d.reg_alloc_unit = j.at("reg_alloc_unit").get<int>();
  d.max_static_smem = j.at("max_static_smem").get<int>();
  d.max_smem_per_block = j.at("max_smem_per_block").get<int>();
  d.smem_per_sm = j.at("smem_per_sm").get<int>();
  d.smem_reserved_per_block = j.at("smem_reserved_per_block").get<int>();
  d.smem_alloc_unit = j.at("smem_alloc_unit").get<int>();
  d.l2_bytes = j.at("l2_bytes").get<long long>();
  d.peak_bandwidth_gbs = j.value("peak_bandwidth_gbs", 0.0);
  return d;
}

}  // namespace ktune
