// The one table of what a GPU allows (threads, registers, shared memory, L2),
// filled from the live device or from a built-in profile per architecture
// when compiling or emulating offline. Families check configs against it,
// static pruning and the launch-fit check read it, the tuned cache keys on
// its name, arch and driver.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ktune {

/// The target when no device says otherwise (compiling, rendering and
/// emulating offline): the H100's.
inline constexpr const char* kDefaultArch = "sm_90";

struct DeviceLimits {
  std::string name = "offline profile";  ///< the GPU's name, or the profile's
  int driver_version = 0;                ///< cuDriverGetVersion, 0 offline
  std::string arch = "sm_90";           ///< NVRTC target, e.g. "sm_80", "sm_90a"
  int sm = 90;                          ///< compute capability, major*10 + minor
  int sm_count = 132;                   ///< multiprocessors
  int warp_size = 32;
  int max_threads_per_block = 1024;
  int max_threads_per_sm = 2048;
  int max_blocks_per_sm = 32;
  int regs_per_sm = 65536;
  int max_regs_per_thread = 255;
  int reg_alloc_unit = 256;              ///< registers are allocated per warp in these units
  int max_static_smem = 48 * 1024;       ///< static __shared__ limit per block
  int max_smem_per_block = 227 * 1024;   ///< static + dynamic, with the opt-in
  int smem_per_sm = 228 * 1024;
  int smem_reserved_per_block = 1024;    ///< the driver's per-block reservation
  int smem_alloc_unit = 128;
  /// DRAM bandwidth from the memory clock and bus width, GB/s; 0 where not
  /// known (offline profiles, the host emulation).
  double peak_bandwidth_gbs = 0;
  long long l2_bytes = 50LL << 20;

  /// Built-in profile for "sm_80", "sm_86", "sm_89", "sm_90" or "sm_90a";
  /// throws kInvalidInput listing those for anything else.
  static DeviceLimits for_arch(const std::string& arch);
  static std::vector<std::string> known_archs();

  nlohmann::json to_json() const;
  static DeviceLimits from_json(const nlohmann::json& j);
};

}  // namespace ktune
