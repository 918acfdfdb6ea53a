#include "base/error.hpp"

namespace ktune {

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidInput: return "invalid input";
    case ErrorKind::kNoDevice: return "no device";
    case ErrorKind::kCuda: return "CUDA error";
    case ErrorKind::kCompile: return "compile error";
    case ErrorKind::kCache: return "cache error";
    case ErrorKind::kIo: return "I/O error";
    case ErrorKind::kCheckFailed: return "check failed";
    case ErrorKind::kInternal: return "internal error";
  }
  return "error";
}

void throw_error(ErrorKind kind, const std::string& message) { throw Error(kind, message); }

}  // namespace ktune
