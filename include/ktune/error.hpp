// ktune's one exception type, thrown by the run-time API (ktune.hpp) and the
// whole library: `what()` is one line for the user, `kind()` what went wrong,
// so a program can tell a bad argument from a missing device or a failed
// compile without reading the message.
#pragma once
#include <stdexcept>
#include <string>

namespace ktune {

/// What went wrong, so callers can react without parsing messages.
enum class ErrorKind {
  kInvalidInput,  ///< bad user input: unknown family, malformed config, bad shape, a buffer too small
  kNoDevice,      ///< no CUDA driver or device
  kCuda,          ///< a CUDA driver call failed
  kCompile,       ///< NVRTC or the host compiler failed
  kCache,         ///< a cache file is corrupt, truncated or from a newer schema
  kIo,            ///< file system error
  kCheckFailed,   ///< a run completed but a check failed (a variant, a comparison, a tuning session)
  kInternal,      ///< a broken invariant
};

/// "invalid input", "no device", "CUDA error", "compile error", "cache error", "I/O error", "check failed",
/// "internal error".
const char* to_string(ErrorKind kind);

/// The one exception type of ktune; `what()` is a single line for the user
/// (a failed compile's goes on with the compiler's log).
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

}  // namespace ktune
