// The CUDA driver API, loaded at run time (dlopen libcuda.so.1, then
// cuGetProcAddress): ktune never links libcuda, so it builds, tests and runs
// on machines without a driver. RAII owners for contexts, modules, buffers
// and events live in tuner/device.hpp.
#pragma once
#include <cuda.h>

#include <string>

namespace ktune::tuner {

/// Function table of the driver calls ktune uses, resolved once.
struct Driver {
#define KTUNE_DRIVER_FN(name) decltype(&::name) name = nullptr;
#include "tuner/cuda/driver_functions.inc"
#undef KTUNE_DRIVER_FN
  /// A kernel's parameter offsets and sizes: CUDA 12.4 on, null with an older driver (nothing else needs it).
  decltype(&::cuFuncGetParamInfo) cuFuncGetParamInfo = nullptr;
  int version = 0;  ///< e.g. 12080 for 12.8

  /// The loaded driver; throws Error(kNoDevice) with the reason (no
  /// libcuda, cuInit failed, zero devices) when it cannot be used.
  static const Driver& get();
  /// Empty when a device is usable, else why not (never throws).
  static std::string unavailable_reason();
  /// Whether this process has initialised the driver (cuInit succeeded);
  /// never initialises it. A process forked after that cannot use the
  /// device: CUDA does not carry over fork().
  static bool initialised();
  /// "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered".
  std::string error_text(CUresult rc) const;
};

}  // namespace ktune::tuner
