// The isolated runner with a fake inner runner that behaves as a GPU worker
// after a sticky CUDA error: once a variant ends in an illegal address,
// everything that process runs afterwards fails with it. The worker must be
// restarted after such a failure, so the variants after it run in a fresh
// process (the GPU twin: a real fault needs a device). Also what comes back
// from a worker whose failure is not UTF-8, or that throws.
#include "tuner/run/isolated_runner.hpp"

#include <dirent.h>
#include <sys/resource.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "base/error.hpp"
#include "base/files.hpp"
#include "support.hpp"
#include "templates/family.hpp"

namespace tuner_run_isolated_runner_test {

using namespace ktune;
using namespace ktune::tuner;

namespace {

/// Fails the run with seed kFaulting as a kernel with an illegal address
/// does, and every run after it in the same process as the driver then does.
class StickyRunner final : public Runner {
 public:
  static constexpr std::uint64_t kFaulting = 13;
  std::string backend() const override { return "gpu"; }
  const DeviceLimits& device() const override { return device_; }
  RunResult run(const Family&, const Config&, const Problem&, const RunOptions& options) override {
    RunResult r;
    if (poisoned_) {
      r.failure = "launch: cuMemAlloc failed: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered";
    } else if (options.seed == kFaulting) {
      poisoned_ = true;
      r.failure = "launch: cuStreamSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was "
                  "encountered";
    } else {
      r.ok = true;
    }
    return r;
  }

 private:
  DeviceLimits device_;
  bool poisoned_ = false;
};

/// Fails every run with `failure`, or throws what no runner should (`thrown`).
class FailingRunner final : public Runner {
 public:
  explicit FailingRunner(std::string failure, bool thrown = false) : failure_(std::move(failure)), thrown_(thrown) {}
  std::string backend() const override { return "gpu"; }
  const DeviceLimits& device() const override { return device_; }
  RunResult run(const Family&, const Config&, const Problem&, const RunOptions&) override {
    if (thrown_) throw 42;
    RunResult r;
    r.failure = failure_;
    return r;
  }

 private:
  DeviceLimits device_;
  std::string failure_;
  bool thrown_;
};

}  // namespace

TEST_CASE("isolated runner: a failure that quotes a source line not in UTF-8 comes back as the result",
          "[session]") {
  // A compiler's error quotes the line it is about, here with a Latin-1 comment.
  auto runner = make_isolated_runner(
      [] { return std::make_unique<FailingRunner>("compile: kernel.cu(4): error: bad // caf\xe9"); });
  const auto& family = templates::find_family("adamw");
  const Problem problem = family.problem_classes().front();
  RunOptions o;
  o.validate = false;
  const RunResult r = runner->run(family, family.default_config(problem), problem, o);
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.failure, Catch::StartsWith("compile: kernel.cu(4): error: bad // caf"));
}

TEST_CASE("isolated runner: what a worker throws ends the worker and is not unwound into the parent's objects",
          "[session]") {
  // The parent holds a lock file: a worker that went on unwinding the stack it shares with the parent would
  // run the lock's destructor, which removes the file.
  const auto lock_file = test::scratch_dir("isolated") / "held.lock";
  const FileLock held(lock_file);
  auto runner = make_isolated_runner([] { return std::make_unique<FailingRunner>("", true); });
  const auto& family = templates::find_family("adamw");
  const Problem problem = family.problem_classes().front();
  RunOptions o;
  o.validate = false;
  const RunResult r = runner->run(family, family.default_config(problem), problem, o);
  CHECK_THAT(r.failure, Catch::StartsWith("crashed: worker exited with status 1"));
  CHECK(std::filesystem::exists(lock_file));
}

TEST_CASE("isolated runner: after a CUDA error the worker is restarted, so the next variant runs clean",
          "[session]") {
  auto runner = make_isolated_runner([] { return std::make_unique<StickyRunner>(); });
  const auto& family = templates::find_family("adamw");
  const Problem problem = family.problem_classes().front();
  const Config config = family.default_config(problem);
  RunOptions o;
  o.validate = false;
  CHECK(runner->run(family, config, problem, o).ok);
  o.seed = StickyRunner::kFaulting;
  const RunResult fault = runner->run(family, config, problem, o);
  CHECK_FALSE(fault.ok);
  CHECK_THAT(fault.failure, Catch::StartsWith("launch: cuStreamSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS") &&
                                Catch::EndsWith("; worker restarted"));
  o.seed = 1;
  for (int i = 0; i < 3; ++i) {
    const RunResult after = runner->run(family, config, problem, o);
    INFO(after.failure);
    CHECK(after.ok);
  }
}

namespace {
/// The descriptors this process holds open, but the listing's own.
std::set<int> open_fds() {
  std::set<int> fds;
  DIR* dir = ::opendir("/proc/self/fd");
  REQUIRE(dir != nullptr);
  while (const dirent* e = ::readdir(dir))
    if (e->d_name[0] != '.' && std::atoi(e->d_name) != ::dirfd(dir)) fds.insert(std::atoi(e->d_name));
  ::closedir(dir);
  return fds;
}
}  // namespace

TEST_CASE("isolated runner: a worker that cannot be started leaves no socket open", "[session]") {
  // Room for three descriptors: the first socket pair is made, the second is not.
  const std::set<int> before = open_fds();
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
  rlimit tight = saved;
  tight.rlim_cur = 0;
  for (int free = 0; free < 3; ++tight.rlim_cur)
    if (!before.count(static_cast<int>(tight.rlim_cur))) ++free;
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &tight) == 0);
  std::string what;
  try {
    make_isolated_runner([] { return std::make_unique<FailingRunner>(""); });
  } catch (const Error& e) {
    what = e.what();
  }
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &saved) == 0);
  CHECK_THAT(what, Catch::StartsWith("cannot create worker sockets: Too many open files"));
  CHECK(open_fds() == before);
}

}  // namespace tuner_run_isolated_runner_test
