#include "support.hpp"

#include <sys/wait.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <utility>
#include <unistd.h>

#include "base/env.hpp"
#include "base/files.hpp"

#if __has_include("tuner/cuda/driver.hpp")
#include "tuner/cuda/driver.hpp"
#define KTUNE_TEST_HAS_DRIVER 1
#endif

namespace ktune::test {

tuner::RunOptions time_once() {
  tuner::RunOptions o;
  o.warmup = 0;
  o.min_repetitions = 1;
  o.max_repetitions = 1;
  o.min_seconds = 0;
  return o;
}

std::filesystem::path scratch_dir(const std::string& name) {
  static std::atomic<int> counter{0};
  const auto dir = std::filesystem::path(KTUNE_BINARY_DIR) / "test-scratch" /
                   (name + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::filesystem::path own_cache_dir(const std::string& name) {
  const auto dir = scratch_dir(name);
  for (const auto& shared : {env::binary_cache_dir(), env::emu_cache_dir()}) {
    std::filesystem::create_directories(shared);  // a link to a folder not made yet would stop the first write
    std::filesystem::create_directory_symlink(std::filesystem::absolute(shared), dir / shared.filename());
  }
  return dir;
}

std::filesystem::path write_tokens(const std::filesystem::path& path, std::span<const std::uint16_t> tokens) {
  write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(tokens.data()), tokens.size_bytes()));
  return path;
}

ScopedEnv::ScopedEnv(std::string name, const char* value) : name_(std::move(name)) {
  if (const char* was = std::getenv(name_.c_str())) was_ = was;
  if (value) ::setenv(name_.c_str(), value, 1);
  else ::unsetenv(name_.c_str());
}

ScopedEnv::~ScopedEnv() {
  if (was_) ::setenv(name_.c_str(), was_->c_str(), 1);
  else ::unsetenv(name_.c_str());
}

std::filesystem::path ktune_exe() { return std::filesystem::path(KTUNE_BINARY_DIR) / "cli" / "ktune"; }

int run_command(const std::string& command, std::string* output) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return -1;
  std::array<char, 4096> buf;
  std::string out;
  while (size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string wait_while_running(const std::string& condition, const std::string& interval) {
  // Its state, the first letter after the name in /proc/PID/stat: ended (Z, a zombie until waited for) or gone,
  // the wait is over.
  return "until " + condition + "; do case $(sed 's/.*) //' /proc/$pid/stat 2>/dev/null) in ''|Z*) break;; esac; " +
         "sleep " + interval + "; done; ";
}

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

void skip_without_gpu() {
#ifdef KTUNE_TEST_HAS_DRIVER
  // Asked in a child process: once this process initialises CUDA, the worker
  // processes it forks (tuner/isolated_runner.hpp) could not use the device.
  int fds[2];
  if (::pipe(fds) != 0) std::exit(kSkipCode);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const std::string why = tuner::Driver::unavailable_reason();
    if (!why.empty() && ::write(fds[1], why.data(), why.size()) < 0) ::_exit(2);
    ::_exit(why.empty() ? 0 : 1);
  }
  ::close(fds[1]);
  std::string why;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) why.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  std::cout << "skipped: no CUDA device: " << why << "\n";
#else
  std::cout << "skipped: built without the driver layer\n";
#endif
  std::exit(kSkipCode);
}

void skip_unless_arch(const std::string& device_arch, const std::string& wanted, const std::string& what) {
  if (device_arch == wanted) return;
  std::printf("skipped: %s needs an %s device; this one is %s\n", what.c_str(), wanted.c_str(), device_arch.c_str());
  std::exit(kSkipCode);
}

}  // namespace ktune::test
