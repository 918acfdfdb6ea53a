// The key a tuned result is stored and looked up under, built in one place
// from a family, a problem and a device (cache/SCHEMA.md says what each
// field means).
#pragma once
#include <string>

#include "base/device_limits.hpp"
#include "cache/entry.hpp"
#include "templates/family.hpp"

namespace ktune::cache {

/// The key of `family` on `problem` for `device`, compiled by NVRTC `nvrtc_version`.
Key make_key(const templates::Family& family, const templates::Problem& problem, const DeviceLimits& device,
             const std::string& nvrtc_version);

}  // namespace ktune::cache
