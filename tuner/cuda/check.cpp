#include "tuner/cuda/check.hpp"

#include <nvrtc.h>

#include <fmt/format.h>

#include "tuner/cuda/driver.hpp"

namespace ktune::tuner::detail {

void throw_cu(int code, const char* call, const char* file, int line) {
  const std::string reason = Driver::unavailable_reason().empty()
                                 ? Driver::get().error_text(static_cast<CUresult>(code))
                                 : "error " + std::to_string(code);
  throw_error(ErrorKind::kCuda, fmt::format("{} failed: {} ({}:{})", call, reason, file, line));
}

void throw_nvrtc(int code, const char* call, const char* file, int line) {
  throw_error(ErrorKind::kCompile, fmt::format("{} failed: {} ({}:{})", call,
                                               nvrtcGetErrorString(static_cast<nvrtcResult>(code)), file, line));
}

void throw_cublas(int code, const char* call, const char* file, int line) {
  throw_error(ErrorKind::kCuda, fmt::format("{} failed: cuBLAS status {} ({}:{})", call, code, file, line));
}

}  // namespace ktune::tuner::detail
