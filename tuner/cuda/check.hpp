// The one error-check header (STYLE.md habit 4): each macro captures the
// call's text and file:line and throws ktune::Error with the library's reason.
#pragma once
#include <string>

#include "base/error.hpp"

namespace ktune::tuner::detail {
[[noreturn]] void throw_cu(int code, const char* call, const char* file, int line);
[[noreturn]] void throw_nvrtc(int code, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas(int code, const char* call, const char* file, int line);
}  // namespace ktune::tuner::detail

/// For CUresult calls through the run-time loaded driver table.
#define KT_CHECK_CU(call)                                                                    \
  do {                                                                                       \
    const int kt_rc_ = static_cast<int>(call);                                               \
    if (kt_rc_ != 0) ::ktune::tuner::detail::throw_cu(kt_rc_, #call, __FILE__, __LINE__);    \
  } while (0)
#define KT_CHECK_NVRTC(call)                                                                 \
  do {                                                                                       \
    const int kt_rc_ = static_cast<int>(call);                                               \
    if (kt_rc_ != 0) ::ktune::tuner::detail::throw_nvrtc(kt_rc_, #call, __FILE__, __LINE__); \
  } while (0)
#define KT_CHECK_CUBLAS(call)                                                                 \
  do {                                                                                        \
    const int kt_rc_ = static_cast<int>(call);                                                \
    if (kt_rc_ != 0) ::ktune::tuner::detail::throw_cublas(kt_rc_, #call, __FILE__, __LINE__); \
  } while (0)
