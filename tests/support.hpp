// Helpers shared by the tests: paths of the tree, a scratch directory, and
// the skip rule for gpu tests.
#pragma once
#include <filesystem>
#include <string>

#include "tuner/run/runner.hpp"

namespace ktune::test {

/// Exit code ctest reads as "skipped" (SKIP_RETURN_CODE in tests/CMakeLists.txt).
inline constexpr int kSkipCode = 77;

/// A fresh, empty directory under the build tree, unique per call.
std::filesystem::path scratch_dir(const std::string& name);

/// Path of the `ktune` executable in this build.
std::filesystem::path ktune_exe();

/// Runs a shell command, capturing stdout+stderr; returns the exit code.
int run_command(const std::string& command, std::string* output);

/// Timing that measures once (no warm-up, one repetition): for checks that a
/// time comes back, as on the emulation, whose times are host wall times.
tuner::RunOptions time_once();

/// Ends the process with kSkipCode, printing `reason`, when no CUDA device
/// can be used: a gpu test is then reported as skipped, never as passed.
void skip_without_gpu();

/// Ends the process with kSkipCode unless `device_arch` is `wanted`, saying
/// that `what` needs it: a test of an arch-specific instruction.
void skip_unless_arch(const std::string& device_arch, const std::string& wanted, const std::string& what);

}  // namespace ktune::test
