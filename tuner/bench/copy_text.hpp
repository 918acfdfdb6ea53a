// How the benchmarks' reports print the copy bandwidth they measure against:
// on the emulation there is none (0), and the cells that divide by it say so.
#pragma once
#include <fmt/format.h>

#include <string>

#include <nlohmann/json.hpp>

#include "base/stamp.hpp"

namespace ktune::tuner {

/// "measured copy bandwidth 4207 GB/s", or that there is none.
inline std::string copy_bandwidth_text(double gbs) {
  return gbs > 0 ? fmt::format("measured copy bandwidth {:.0f} GB/s", gbs)
                 : std::string("no copy bandwidth (emulated: % of copy and the floor's traffic left out)");
}

/// A fraction of the copy bandwidth as a cell: "85.1%", or "-" without one.
inline std::string percent_of_copy(double fraction, double gbs) {
  return gbs > 0 ? fmt::format("{:.1f}%", 100 * fraction) : std::string("-");
}

/// A rate in GB/s as a cell: "3810", or "-" where there is no copy bandwidth
/// (the emulation: its host wall time says nothing about a GPU's GB/s).
inline std::string gbs_cell(double rate, double copy_gbs) {
  return copy_gbs > 0 ? fmt::format("{:.0f}", rate) : std::string("-");
}

/// The driver a report measured under, from cuDriverGetVersion's CUDA driver API version (13000; 0 on the
/// emulation): "NVIDIA driver 580.159.04, CUDA driver API 13000", or that there is none.
inline std::string driver_text(int api_version) {
  if (api_version <= 0) return "no driver (emulated)";
  const std::string release = nvidia_driver_release();
  return fmt::format("NVIDIA driver {}, CUDA driver API {}", release.empty() ? "unknown" : release, api_version);
}
/// Adds the driver to a report's JSON: "cuda_driver_api_version" (cuDriverGetVersion, 13000) and
/// "nvidia_driver" (its release, "580.159.04"), each null where there is none. Files written before these two
/// hold the API version alone, as "driver_version" (and "driver" for e2e).
inline void add_driver(nlohmann::json& j, int api_version) {
  j["cuda_driver_api_version"] = api_version > 0 ? nlohmann::json(api_version) : nlohmann::json();
  const std::string release = api_version > 0 ? nvidia_driver_release() : "";
  j["nvidia_driver"] = release.empty() ? nlohmann::json() : nlohmann::json(release);
}

/// A quantity a report has only where it measured one (a copy bandwidth, a
/// fraction of it, a driver version; 0 on the emulation): null in JSON
/// otherwise, as the tables print "-".
inline nlohmann::json measured_or_null(double value) { return value > 0 ? nlohmann::json(value) : nlohmann::json(); }
inline nlohmann::json measured_or_null(int value) { return value > 0 ? nlohmann::json(value) : nlohmann::json(); }

}  // namespace ktune::tuner
