// The thread pool: bounded sizes, and a pool the system cannot fully start
// is stopped and joined and reported, never left hanging.
#include "base/thread_pool.hpp"

#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "base/env.hpp"
#include "base/error.hpp"

namespace base_thread_pool_test {

namespace {

// Address space this process maps now, in bytes.
rlim_t mapped_bytes() {
  std::ifstream statm("/proc/self/statm");
  unsigned long pages = 0;
  statm >> pages;
  return static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace

TEST_CASE("thread pool runs jobs and refuses sizes outside 1..kMaxThreads", "[base][thread_pool]") {
  ktune::ThreadPool pool(3);
  CHECK(pool.size() == 3);
  CHECK(pool.submit([] { return 42; }).get() == 42);
  for (unsigned bad : {0u, ktune::env::kMaxThreads + 1}) {
    try {
      ktune::ThreadPool too(bad);
      FAIL("expected an error for " << bad << " threads");
    } catch (const ktune::Error& e) {
      CHECK(e.kind() == ktune::ErrorKind::kInvalidInput);
      CHECK_THAT(e.what(), Catch::Contains("1..1024"));
    }
  }
  CHECK(ktune::env::check_thread_count(ktune::env::kMaxThreads, "--threads") == ktune::env::kMaxThreads);
  CHECK_THROWS_WITH(ktune::env::check_thread_count(-3, "--threads"),
                    Catch::Contains("--threads") && Catch::Contains("got -3"));
}

TEST_CASE("a thread the system refuses: the started ones are joined and the error is clear, no hang",
          "[base][thread_pool]") {
  // In a child whose address space leaves room for a few thread stacks only.
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const rlim_t limit = mapped_bytes() + (48u << 20);
    const rlimit as{limit, limit};
    if (::setrlimit(RLIMIT_AS, &as) != 0) ::_exit(10);
    try {
      ktune::ThreadPool pool(ktune::env::kMaxThreads);
      ::_exit(11);  // every thread started: the limit did not bite
    } catch (const ktune::Error& e) {
      const std::string what = e.what();
      ::_exit(e.kind() == ktune::ErrorKind::kInvalidInput && what.find("cannot start 1024 threads") == 0 ? 0 : 12);
    } catch (...) {
      ::_exit(13);
    }
  }
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      FAIL("the pool hung after a thread could not be started");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  INFO("child status " << status);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

}  // namespace base_thread_pool_test
