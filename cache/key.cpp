#include "cache/key.hpp"

namespace ktune::cache {

Key make_key(const templates::Family& family, const templates::Problem& problem, const DeviceLimits& device,
             const std::string& nvrtc_version) {
  Key k;
  k.family = family.name();
  k.source_hash = family.source_hash();
  k.problem_key = problem.key();
  k.dtype = problem.dtype;
  k.arch = device.arch;
  k.gpu_name = device.name;
  k.nvrtc_version = nvrtc_version;
  k.driver_version = std::to_string(device.driver_version);
  k.dims = problem.dims;
  return k;
}

}  // namespace ktune::cache
