// What every recorded result is stamped with: ktune's version, the git
// revision it was built from, and the time in UTC.
#pragma once
#include <string>

namespace ktune {

/// "0.1.0"
std::string ktune_version();
/// Short git revision of the source tree at configure time ("unknown" outside git).
std::string git_revision();
/// Current time as "YYYY-MM-DDTHH:MM:SSZ".
std::string utc_now();
/// The NVIDIA driver's release, "580.159.04" (what nvidia-smi calls the driver version), read from
/// /proc/driver/nvidia/version (or `path`); "" where there is none. Not cuDriverGetVersion's 13000, which is
/// the CUDA driver API version the driver supports.
std::string nvidia_driver_release(const std::string& path = "/proc/driver/nvidia/version");
/// The release in the text of /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX x86_64 Kernel Module
/// 580.159.04  ..."): the first number of dotted parts on the NVRM line; "" where there is none.
std::string parse_nvidia_driver_release(const std::string& text);

}  // namespace ktune
