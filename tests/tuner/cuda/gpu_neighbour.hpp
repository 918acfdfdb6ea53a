// Another process on a GPU, for the tests of GPU marks: a forked child that
// marks the GPU and waits to be killed.
#pragma once
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "tuner/cuda/gpu_marks.hpp"

namespace ktune::test {

/// A forked process that marks the GPU `uuid` in `dir` (with `own_root`, as a process of its own; else in this
/// process's session, as a tuning session's worker), says so on a pipe and waits to be killed. It touches no GPU.
struct GpuNeighbour {
  pid_t pid = -1;
  GpuNeighbour(const std::filesystem::path& dir, const std::string& uuid, bool own_root) {
    const std::string session = tuner::process_root();
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(ready[0]);
      {
        if (!own_root) tuner::set_process_root(session);  // as the isolated runner's worker does
        const tuner::GpuMark mark(dir, uuid);
        const char byte = 1;
        if (::write(ready[1], &byte, 1) != 1) ::_exit(1);
        ::pause();  // until killed
      }
      ::_exit(0);
    }
    ::close(ready[1]);
    char byte = 0;
    REQUIRE(::read(ready[0], &byte, 1) == 1);
    ::close(ready[0]);
  }
  GpuNeighbour(const GpuNeighbour&) = delete;
  GpuNeighbour& operator=(const GpuNeighbour&) = delete;
  /// Ends it with SIGKILL: no destructor runs, so its mark's file stays, unlocked.
  void kill() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    pid = -1;
  }
  ~GpuNeighbour() { kill(); }
};

}  // namespace ktune::test
