// A launch installs handlers for SIGSEGV, SIGBUS, SIGFPE and SIGUSR2 (the
// hang watchdog's) while it runs; a program's own signals still reach its
// own disposition: every SIGUSR2 sent to it during launches, on whichever
// thread, reaches its handler (and is no hang), one it ignores stays ignored,
// one left at the default ends it, and a handler it installs while a launch
// runs stays after the launch.
#include <catch2/catch.hpp>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tuner/emu_probe.hpp"

namespace tuner_emu_signals_emu_test {

using ktune::templates::ArgPack;
using namespace std::chrono_literals;

namespace {

constexpr const char* kSource = R"(
#include <pthread.h>  // the emulation's workers are threads of the process: k_who names them
__global__ void k_work(unsigned* out, int iterations) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  unsigned acc = i;
  for (int k = 0; k < iterations; ++k) acc = acc * 1664525u + 1013904223u;
  out[i] = acc;
}
__global__ void k_who(unsigned long long* out, int iterations) {
  volatile unsigned acc = threadIdx.x;
  for (int k = 0; k < iterations; ++k) acc = acc * 1664525u + 1013904223u;
  if (threadIdx.x == 0) out[blockIdx.x] = static_cast<unsigned long long>(::pthread_self());
}
__global__ void k_wait(int* flags, unsigned long long* who) {
  volatile int* f = flags;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *static_cast<volatile unsigned long long*>(who) = static_cast<unsigned long long>(::pthread_self());
    f[0] = 1;         // started
    while (!f[1]) {}  // until the host lets it go
  }
}
__global__ void k_spin(int* out, int spin) {
  volatile int s = spin;
  if (threadIdx.x == 5) while (s) {}
  out[threadIdx.x] = 1;
}
)";
const std::vector<std::string> kKernels = {"k_work", "k_who", "k_wait", "k_spin"};
enum { kWork, kWho, kWait, kSpin };

ktune::test::EmuProbe make_probe(unsigned hang_seconds) {
  return ktune::test::EmuProbe(kSource, kKernels, 2, ktune::env::EmuSchedule{}, "common/kt.cuh", hang_seconds);
}

std::atomic<int> g_received{0};
void count_with_info(int, siginfo_t*, void*) { ++g_received; }
void count_plain(int) { ++g_received; }

/// The program's SIGUSR2 handler (with siginfo or plain) for the life of the object.
class ProgramHandler {
 public:
  explicit ProgramHandler(bool with_info) {
    struct sigaction action {};
    if (with_info) {
      action.sa_sigaction = count_with_info;
      action.sa_flags = SA_SIGINFO;
    } else {
      action.sa_handler = count_plain;
    }
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGUSR2, &action, &before_);
  }
  ~ProgramHandler() { ::sigaction(SIGUSR2, &before_, nullptr); }
  ProgramHandler(const ProgramHandler&) = delete;
  ProgramHandler& operator=(const ProgramHandler&) = delete;

 private:
  struct sigaction before_ {};
};

/// Blocks (or unblocks) SIGUSR2 for the calling thread.
void block_usr2(bool block) {
  sigset_t usr2;
  sigemptyset(&usr2);
  sigaddset(&usr2, SIGUSR2);
  ::pthread_sigmask(block ? SIG_BLOCK : SIG_UNBLOCK, &usr2, nullptr);
}

struct sigaction disposition(int sig) {
  struct sigaction a {};
  ::sigaction(sig, nullptr, &a);
  return a;
}

bool same_handler(const struct sigaction& a, const struct sigaction& b) {
  return (a.sa_flags & SA_SIGINFO) == (b.sa_flags & SA_SIGINFO) &&
         ((a.sa_flags & SA_SIGINFO) ? a.sa_sigaction == b.sa_sigaction : a.sa_handler == b.sa_handler);
}

/// Waits (30 s at most) until `flag` is set.
bool wait_for(const volatile int& flag) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!flag && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  return flag != 0;
}

/// A child process that leaves SIGUSR2 at `action` sends one to the worker
/// running a launch's kernel, inside the kernel's thread; its status: exit 0
/// if the launch then passed, 1 if it failed, or the signal that ended it.
int child_status(void (*action)(int)) {
  { auto warm = make_probe(0); }  // the module compiled here: the child only loads it
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGUSR2, action);
    auto p = make_probe(0);
    int* flags = p.buffer("flags", std::vector<int>(2));
    auto* waiter = p.buffer("waiter", std::vector<unsigned long long>(1));
    std::thread sender([flags, waiter] {
      if (wait_for(flags[0])) {
        ::pthread_kill(static_cast<pthread_t>(*static_cast<volatile unsigned long long*>(waiter)), SIGUSR2);
      }
      std::this_thread::sleep_for(1s);
      flags[1] = 1;
    });
    const bool passed = p.launch_error(kWait, {4, 1, 1}, {32, 1, 1}, ArgPack().add(flags).add(waiter)).empty();
    sender.join();
    ::_exit(passed ? 0 : 1);
  }
  REQUIRE(pid > 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return status;
}

}  // namespace

TEST_CASE("a SIGUSR2 signal sent to the program during launches reaches its own handler, every one, and is no hang",
          "[emu]") {
  auto p = make_probe(1);  // the watchdog watches, at 1 s: long past any block of these launches
  constexpr unsigned kBlocks = 8, kThreads = 64;
  constexpr int kIterations = 20000;
  unsigned* out = p.buffer("out", std::vector<unsigned>(kBlocks * kThreads));
  std::vector<unsigned> expected(kBlocks * kThreads);
  for (unsigned i = 0; i < expected.size(); ++i) {
    unsigned acc = i;
    for (int k = 0; k < kIterations; ++k) acc = acc * 1664525u + 1013904223u;
    expected[i] = acc;
  }
  // The workers, for signals sent to them: mostly inside a kernel's thread during a launch.
  auto* who = p.buffer("who", std::vector<unsigned long long>(64));
  REQUIRE(p.launch_error(kWho, {64, 1, 1}, {32, 1, 1}, ArgPack().add(who).add(kIterations)).empty());
  std::vector<pthread_t> workers;
  for (const unsigned long long w : p.read(who, 64))
    if (std::find(workers.begin(), workers.end(), static_cast<pthread_t>(w)) == workers.end())
      workers.push_back(static_cast<pthread_t>(w));
  REQUIRE(std::find(workers.begin(), workers.end(), pthread_t{}) == workers.end());  // every block ran
  const pthread_t launcher = ::pthread_self();
  enum class Target { kProcess, kLauncher, kWorkers };
  for (const bool with_info : {true, false})
    for (const Target target : {Target::kProcess, Target::kLauncher, Target::kWorkers}) {
      INFO((with_info ? "SA_SIGINFO" : "plain") << " handler, sent to "
                                                << (target == Target::kProcess    ? "the process"
                                                    : target == Target::kLauncher ? "the launching thread"
                                                                                  : "the workers"));
      ProgramHandler handler(with_info);
      g_received = 0;
      constexpr int kSignals = 200;
      std::atomic<bool> launching{false}, done{false};
      int sent = 0, lost = 0;
      std::thread sender([&] {
        block_usr2(true);
        while (!launching) std::this_thread::yield();
        // One at a time, the next once the handler counted the last (a signal pending twice is delivered once).
        for (int k = 0; k < kSignals && lost < 3; ++k) {
          const int before = g_received;
          if (target == Target::kProcess)
            ::kill(::getpid(), SIGUSR2);
          else
            ::pthread_kill(target == Target::kLauncher ? launcher : workers[k % workers.size()], SIGUSR2);
          ++sent;
          const auto deadline = std::chrono::steady_clock::now() + 2s;
          while (g_received == before && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
          if (g_received == before) ++lost;
        }
        done = true;
      });
      int launches = 0, wrong = 0;
      std::vector<std::string> errors;
      while (!done) {
        std::fill(out, out + expected.size(), 0u);
        launching = true;
        const auto error =
            p.launch_error(kWork, {kBlocks, 1, 1}, {kThreads, 1, 1}, ArgPack().add(out).add(kIterations));
        ++launches;
        if (!error.empty())
          errors.push_back(error);
        else if (p.read(out, expected.size()) != expected)
          ++wrong;
      }
      sender.join();
      INFO(launches << " launches, " << errors.size() << " failed; the first: " << (errors.empty() ? "" : errors[0]));
      CHECK(sent == kSignals);
      CHECK(g_received == sent);
      CHECK(errors.empty());
      CHECK(wrong == 0);
    }
  // With the program's handler in place, the watchdog's own signal still ends a thread that hangs, and only that.
  ProgramHandler handler(true);
  g_received = 0;
  int* spun = p.buffer("spun", std::vector<int>(64));
  const auto error = p.launch_error(kSpin, {2, 1, 1}, {64, 1, 1}, ArgPack().add(spun).add(1));
  INFO(error);
  CHECK_THAT(error, Catch::StartsWith("emulation: hang in kernel k_spin, block ("));
  CHECK(g_received == 0);
  CHECK(p.launch_error(kSpin, {2, 1, 1}, {64, 1, 1}, ArgPack().add(spun).add(0)).empty());
}

TEST_CASE("a signal handler the program installs while a launch runs stays after the launch", "[emu]") {
  auto p = make_probe(0);
  int* flags = p.buffer("flags", std::vector<int>(2));
  auto* waiter = p.buffer("waiter", std::vector<unsigned long long>(1));
  const struct sigaction usr2_before = disposition(SIGUSR2), segv_before = disposition(SIGSEGV);
  std::string error = "not run";
  std::thread launcher([&] { error = p.launch_error(kWait, {4, 1, 1}, {32, 1, 1}, ArgPack().add(flags).add(waiter)); });
  if (!wait_for(flags[0])) {
    flags[1] = 1;
    launcher.join();
    FAIL("the launch did not start: " << error);
  }
  CHECK_FALSE(same_handler(disposition(SIGUSR2), usr2_before));  // the launch's, meanwhile
  const struct sigaction program = [] {
    struct sigaction a {};
    a.sa_handler = count_plain;
    sigemptyset(&a.sa_mask);
    ::sigaction(SIGUSR2, &a, nullptr);
    return a;
  }();
  flags[1] = 1;
  launcher.join();
  CHECK(error.empty());
  REQUIRE(same_handler(disposition(SIGUSR2), program));
  CHECK(same_handler(disposition(SIGSEGV), segv_before));  // the others as they were before the launch
  // The next launch puts it back too, and then it takes the program's signals.
  CHECK(p.launch_error(kWait, {4, 1, 1}, {32, 1, 1}, ArgPack().add(flags).add(waiter)).empty());
  REQUIRE(same_handler(disposition(SIGUSR2), program));
  g_received = 0;
  ::raise(SIGUSR2);
  CHECK(g_received == 1);
  ::sigaction(SIGUSR2, &usr2_before, nullptr);
}

TEST_CASE("a SIGUSR2 signal the program ignores or leaves at its default is ignored or ends it during a launch, as "
          "without ktune",
          "[emu]") {
  const int ignored = child_status(SIG_IGN);
  CHECK(WIFEXITED(ignored));
  CHECK(WEXITSTATUS(ignored) == 0);
  const int by_default = child_status(SIG_DFL);
  INFO("exited " << (WIFEXITED(by_default) ? WEXITSTATUS(by_default) : -1));
  REQUIRE(WIFSIGNALED(by_default));
  CHECK(WTERMSIG(by_default) == SIGUSR2);
}

}  // namespace tuner_emu_signals_emu_test
