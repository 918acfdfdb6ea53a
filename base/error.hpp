// Typed errors for the whole library. Library code throws; only `main`
// decides exit codes (STYLE.md habit 4).
#pragma once
#include <string>

#include "include/ktune/error.hpp"  // ErrorKind and Error: the run-time API's too

namespace ktune {

[[noreturn]] void throw_error(ErrorKind kind, const std::string& message);

}  // namespace ktune

/// Throws ktune::Error(kInvalidInput) with the message unless `cond` holds.
#define KTUNE_REQUIRE(cond, ...)                                                      \
  do {                                                                                \
    if (!(cond)) ::ktune::throw_error(::ktune::ErrorKind::kInvalidInput, __VA_ARGS__); \
  } while (0)
