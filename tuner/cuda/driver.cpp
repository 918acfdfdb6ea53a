#include "tuner/cuda/driver.hpp"

#include <dlfcn.h>

#include <atomic>
#include <mutex>

#include "base/env.hpp"
#include "base/error.hpp"

namespace ktune::tuner {
namespace {

std::atomic<bool> g_initialised{false};

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

struct Loaded {
  Driver driver;
  std::string failure;  // empty when usable
};

const Loaded& load() {
  static const Loaded loaded = [] {
    Loaded l;
    if (env::no_device()) {
      l.failure = "KTUNE_NO_DEVICE is set";
      return l;
    }
    void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      l.failure = "the NVIDIA driver library libcuda.so.1 is not installed";
      return l;
    }
    auto get_proc = reinterpret_cast<GetProcAddress>(::dlsym(lib, "cuGetProcAddress_v2"));
    if (!get_proc) {
      l.failure = "libcuda.so.1 is older than CUDA 12 (no cuGetProcAddress_v2)";
      return l;
    }
    Driver& d = l.driver;
    std::string missing;
#define KTUNE_DRIVER_FN(name)                                                                          \
  {                                                                                                    \
    CUdriverProcAddressQueryResult status{};                                                           \
    void* fn = nullptr;                                                                                \
    if (get_proc(#name, &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS || !fn) \
      missing += std::string(missing.empty() ? "" : ", ") + #name;                                     \
    d.name = reinterpret_cast<decltype(d.name)>(fn);                                                   \
  }
#include "tuner/cuda/driver_functions.inc"
#undef KTUNE_DRIVER_FN
    if (!missing.empty()) {
      l.failure = "the driver lacks " + missing;
      return l;
    }
    if (void* fn = nullptr; get_proc("cuFuncGetParamInfo", &fn, 12040, CU_GET_PROC_ADDRESS_DEFAULT, nullptr) ==
                                CUDA_SUCCESS)
      d.cuFuncGetParamInfo = reinterpret_cast<decltype(d.cuFuncGetParamInfo)>(fn);
    if (const CUresult rc = d.cuInit(0); rc != CUDA_SUCCESS) {
      l.failure = "cuInit failed: " + d.error_text(rc);
      return l;
    }
    g_initialised = true;
    d.cuDriverGetVersion(&d.version);
    int count = 0;
    if (const CUresult rc = d.cuDeviceGetCount(&count); rc != CUDA_SUCCESS) {
      l.failure = "cuDeviceGetCount failed: " + d.error_text(rc);
    } else if (count == 0) {
      l.failure = "the driver reports zero devices";
    }
    return l;
  }();
  return loaded;
}

}  // namespace

const Driver& Driver::get() {
  const Loaded& l = load();
  if (!l.failure.empty()) throw_error(ErrorKind::kNoDevice, l.failure);
  return l.driver;
}

std::string Driver::unavailable_reason() { return load().failure; }

bool Driver::initialised() { return g_initialised; }

std::string Driver::error_text(CUresult rc) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (cuGetErrorName) cuGetErrorName(rc, &name);
  if (cuGetErrorString) cuGetErrorString(rc, &text);
  return std::string(name ? name : "CUDA_ERROR_" + std::to_string(static_cast<int>(rc))) + ": " +
         (text ? text : "unknown error");
}

}  // namespace ktune::tuner
