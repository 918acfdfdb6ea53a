// The config a runtime uses for a family and problem: the tuned cache's
// exact entry, else its nearest tuned problem (same family, dtype, arch),
// else the family default — always checked against the family's space and
// constraints before use.
#pragma once
#include <string>

#include "cache/store.hpp"
#include "templates/family.hpp"

namespace ktune::tuner {

struct ChosenConfig {
  Config config;
  std::string source;  ///< "exact", "nearest (distance 1.00)", "default", "default (…)"
};

/// `file` may be null (no cache: the default).
ChosenConfig choose_config(const templates::Family& family, const templates::Problem& problem,
                           const templates::DeviceLimits& device, const cache::CacheFile* file);

}  // namespace ktune::tuner
