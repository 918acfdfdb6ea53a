// Helpers shared by the tests: paths of the tree, a scratch directory, a
// cache folder of a test's own, waits for a background process, and the skip
// rule for gpu tests.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>

#include "tuner/run/runner.hpp"

namespace ktune::test {

/// Exit code ctest reads as "skipped" (SKIP_RETURN_CODE in tests/CMakeLists.txt).
inline constexpr int kSkipCode = 77;

/// A fresh, empty directory under the build tree, unique per call.
std::filesystem::path scratch_dir(const std::string& name);

/// A KTUNE_CACHE_DIR of one test's own, in a scratch_dir(name). What ktune keeps there under a fixed name, as
/// the session log of a tune given no --log, is the test's alone: the suite's cache folder is every test's,
/// and one running meanwhile (the same test under the other emulation schedule, too) may start a session at
/// that very path. Its compiled binaries and emulation objects, named by what they hold, are the suite's:
/// cubin/ and emu/ link to those of the cache folder this process has.
std::filesystem::path own_cache_dir(const std::string& name);

/// Writes `tokens` to `path` as a token file: uint16 ids, host byte order, nothing else. Returns `path`.
std::filesystem::path write_tokens(const std::filesystem::path& path, std::span<const std::uint16_t> tokens);

/// Sets an environment variable of this process (unsets it, given nullptr) while alive, then puts back what
/// was there.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> was_;
};

/// Path of the `ktune` executable in this build.
std::filesystem::path ktune_exe();

/// Runs a shell command, capturing stdout+stderr; returns the exit code.
int run_command(const std::string& command, std::string* output);

/// Shell text that waits until `condition` (a shell command) succeeds while the process whose id is in $pid
/// runs, looking again every `interval` seconds: how a test waits for a process it started in the background
/// to get somewhere before it signals it. No time limit of its own (ctest's TIMEOUT is the test's): a machine
/// busy with other tests may take minutes to compile and start what an idle one does in seconds.
std::string wait_while_running(const std::string& condition, const std::string& interval = "0.1");

/// How many times `what` occurs in `text` (overlapping ones each counted).
std::size_t occurrences(const std::string& text, const std::string& what);

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
