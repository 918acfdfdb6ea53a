// Typed errors for the whole library. Library code throws; only `main`
// decides exit codes (STYLE.md habit 4).
#pragma once
#include <stdexcept>
#include <string>

namespace ktune {

/// What went wrong, so callers can react without parsing messages.
enum class ErrorKind {
  kInvalidInput,  ///< bad user input: unknown family, malformed config, bad shape
  kNoDevice,      ///< no CUDA driver or device
  kCuda,          ///< a CUDA driver call failed
  kCompile,       ///< NVRTC or the host compiler failed
  kCache,         ///< a cache file is corrupt, truncated or from a newer schema
  kIo,            ///< file system error
  kCheckFailed,   ///< a run completed but a check failed (a variant, a comparison)
  kInternal,      ///< a broken invariant
};

const char* to_string(ErrorKind kind);

/// The one exception type of ktune; `what()` is a single line for the user.
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

[[noreturn]] void throw_error(ErrorKind kind, const std::string& message);

}  // namespace ktune

/// Throws ktune::Error(kInvalidInput) with the message unless `cond` holds.
#define KTUNE_REQUIRE(cond, ...)                                                      \
  do {                                                                                \
    if (!(cond)) ::ktune::throw_error(::ktune::ErrorKind::kInvalidInput, __VA_ARGS__); \
  } while (0)
