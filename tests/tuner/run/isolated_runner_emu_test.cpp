// A whole tuning session on the emulation runner, in a worker process:
// compile, run, validate, record, and a planted variant that crashes and one
// that hangs, neither of which ends the session; then a resumed session.
#include "tuner/run/isolated_runner.hpp"

#include <catch2/catch.hpp>
#include <algorithm>
#include <fstream>

#include <fmt/format.h>

#include "base/error.hpp"
#include "search/winner.hpp"
#include "support.hpp"
#include "tuner/run/doubling_workload.hpp"
#include "templates/render.hpp"
#include "tuner/run/emu_runner.hpp"
#include "tuner/session/session.hpp"

namespace tuner_run_isolated_runner_emu_test {

using namespace ktune;
using namespace ktune::templates;
using namespace ktune::tuner;

namespace {

/// y = 2x, except that mode 1 aborts the process and mode 2 never returns.
class PlantedFamily : public Family {
 public:
  std::string name() const override { return "planted"; }
  std::string summary() const override { return "test family with a crashing and a hanging variant"; }
  std::vector<std::string> source_files() const override { return {}; }
  const Space& space() const override { return space_; }
  std::vector<Problem> problem_classes() const override { return {Problem{"f32", {{"n", 300}}}}; }
  void check_problem(const Problem&) const override {}
  Config default_config(const Problem&) const override { return Config({{"mode", 0}, {"threads", 64}}); }
  bool is_valid(const Config&, const Problem&, const DeviceLimits&, std::string*) const override { return true; }
  Rendered render(const Config& c, const Problem&) const override {
    Rendered r;
    // The mode is an argument, not a template parameter: one object for every variant, compiled before the
    // timed sessions (warm_object), so the worker's time limit covers runs only.
    r.source = R"(
__global__ void planted(const float* x, float* y, long long n, int mode) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (mode == 1) __builtin_abort();
  if (mode == 2) { volatile int spin = 0; while (spin == 0) {} }
  if (i < n) y[i] = 2.0f * x[i];
}
)";
    r.kernels = {"planted"};
    return r;
  }
  Workload make_workload(const Problem& p, std::uint64_t seed) const override {
    return test::doubling_workload(p, seed);
  }
  std::vector<BufferShape> buffer_shapes(const Problem& p) const override { return test::doubling_shapes(p); }
  std::vector<Launch> plan(const Config& c, const Problem& p, const std::vector<std::uint64_t>& a,
                           const DeviceLimits&) const override {
    Launch l;
    const auto threads = static_cast<unsigned>(c.at("threads"));
    l.grid = {static_cast<unsigned>((p.dim("n") + threads - 1) / threads), 1, 1};
    l.block = {threads, 1, 1};
    l.args.add(a[0]).add(a[1]).add(static_cast<long long>(p.dim("n"))).add(static_cast<int>(c.at("mode")));
    return {std::move(l)};
  }
  double flops(const Problem& p) const override { return static_cast<double>(p.dim("n")); }
  double bytes(const Problem& p) const override { return 8.0 * static_cast<double>(p.dim("n")); }

 private:
  Space space_{{{"mode", {0, 1, 2, 3}, "0, 3: correct; 1: aborts; 2: hangs"}, {"threads", {64}, ""}}};
};

const PlantedFamily kPlanted;

/// The planted family's correct variants only.
class CorrectFamily final : public PlantedFamily {
 public:
  std::string name() const override { return "planted_correct"; }
  const Space& space() const override { return space_; }

 private:
  Space space_{{{"mode", {0, 3}, "both correct"}, {"threads", {64}, ""}}};
};
const CorrectFamily kCorrect;

/// Made when a runner is, not at start-up: EmuOptions reads the emulation's schedule, which the test's
/// --emu-schedule sets once the program runs.
EmuOptions emu_options() { return EmuOptions{1, "sm_80"}; }

/// Compiles the planted object in this process (cached for the workers), running a correct variant.
void warm_object() {
  const Problem problem = kPlanted.problem_classes().front();
  REQUIRE(make_emu_runner(emu_options())->run(kPlanted, kPlanted.default_config(problem), problem, RunOptions{}).ok);
}

/// A worker's time limit: ample for a run of the compiled object, so that the hanging variant costs no more.
constexpr double kTimeoutS = 4;

std::unique_ptr<Runner> isolated_emu() {
  warm_object();
  IsolationOptions o;
  o.timeout_s = kTimeoutS;
  o.extra_families = {&kPlanted, &kCorrect};
  return make_isolated_runner([] { return make_emu_runner(emu_options()); }, o);
}

}  // namespace

TEST_CASE("isolated emulation: a crashing and a hanging variant are failures and the session goes on",
          "[emu][session]") {
  auto runner = isolated_emu();
  CHECK(runner->backend() == "emu");
  TuneOptions o;
  o.run.time = true;
  o.finalists = 1;
  o.log_path = (test::scratch_dir("isolated") / "session.log").string();
  const Problem problem = kPlanted.problem_classes().front();
  const TuneSummary s = tune(kPlanted, problem, *runner, o);
  CHECK(s.evaluations == 4);
  CHECK(s.failures == 2);
  REQUIRE(s.best);
  CHECK((s.best->config.at("mode") == 0 || s.best->config.at("mode") == 3));
  // The log holds every result with its reason.
  std::ifstream in(o.log_path);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK_THAT(all, Catch::Contains("crashed: worker died of signal 6"));
  CHECK_THAT(all, Catch::Contains(fmt::format("timeout: no result within {:g} s", kTimeoutS)));
  // The worker was restarted: a correct variant still runs and validates.
  const RunResult again = runner->run(kPlanted, Config({{"mode", 3}, {"threads", 64}}), problem, RunOptions{});
  CHECK(again.ok);
}

TEST_CASE("isolated emulation: a session resumed after its worker was killed re-runs only what is missing",
          "[emu][session]") {
  const Problem problem = kPlanted.problem_classes().front();
  TuneOptions o;
  o.run.time = true;
  o.finalists = 1;
  o.log_path = (test::scratch_dir("isolated") / "session.log").string();
  {
    auto runner = isolated_emu();
    o.budget = "2";  // mode 0 (the default) and mode 1, which kills its worker
    const auto s = tune(kPlanted, problem, *runner, o);
    CHECK(s.failures == 1);
  }
  o.budget = "";
  o.resume = true;
  auto runner = isolated_emu();
  TuneOptions rest = o;
  const auto s = tune(kPlanted, problem, *runner, rest);
  CHECK(s.resumed == 2);
  CHECK(s.evaluations == 4);
  REQUIRE(s.best);
}

TEST_CASE("isolated emulation: the winner rule and the cache entry see every side-by-side repetition",
          "[emu][session]") {
  // Each finalist is timed twice (its evaluation, then again side by side),
  // 4 repetitions each time: the winner rule judges the side-by-side ones, and
  // the entry holds those 4 as they came back from the worker, its percentiles
  // theirs, not a median's alone.
  auto runner = isolated_emu();
  TuneOptions o;
  o.run.time = true;
  o.run.min_repetitions = 4;
  o.run.max_repetitions = 4;
  o.run.min_seconds = 1e6;
  o.finalists = 2;
  const Family& family = kCorrect;
  const Problem problem = family.problem_classes().front();
  const TuneSummary s = tune(family, problem, *runner, o);
  REQUIRE(s.best);
  REQUIRE(s.best->result.timing);
  const Measurement& t = *s.best->result.timing;
  CHECK(t.repetitions == 4);
  CHECK(t.samples_ms.size() == 4);
  CHECK_THAT(t.method, Catch::Contains("timed again beside the other finalists"));
  const cache::Entry e = cache_entry(family, problem, runner->device(), s);
  CHECK(e.repetitions == 4);
  std::vector<double> sorted = t.samples_ms;
  std::sort(sorted.begin(), sorted.end());
  CHECK(e.time_ms == Approx(search::percentile(sorted, 0.5)));
  CHECK(e.p20_ms == Approx(search::percentile(sorted, 0.2)));
  CHECK(e.p80_ms == Approx(search::percentile(sorted, 0.8)));
  CHECK(e.spread == Approx((e.p80_ms - e.p20_ms) / e.time_ms));
}

TEST_CASE("isolated runner: a worker that cannot start reports why", "[emu][session]") {
  CHECK_THROWS_WITH(make_isolated_runner([]() -> std::unique_ptr<Runner> {
                      throw Error(ErrorKind::kNoDevice, "no GPU in this worker");
                    }),
                    Catch::Contains("no GPU in this worker"));
}

}  // namespace tuner_run_isolated_runner_emu_test
