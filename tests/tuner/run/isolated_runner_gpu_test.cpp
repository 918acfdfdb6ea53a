// The isolated runner on a GPU: a variant whose kernel writes to an illegal
// address leaves its context with a sticky error; it is a "launch:" failure,
// its worker is restarted, and the variants after it run and validate in the
// fresh one (the twin of isolated_runner_test.cpp's fake); a whole tuning
// session through workers. No case here touches the device in this process
// (its workers could not use it after). Skipped without a device.
#include "tuner/run/isolated_runner.hpp"

#include <catch2/catch.hpp>

#include "support.hpp"
#include "tuner/run/doubling_workload.hpp"
#include "templates/render.hpp"
#include "tuner/run/gpu_runner.hpp"
#include "tuner/session/session.hpp"

namespace tuner_run_isolated_runner_gpu_test {

using namespace ktune;
using namespace ktune::templates;
using namespace ktune::tuner;

namespace {

/// y = 2x; mode 1 also writes through a null pointer.
class FaultingFamily final : public Family {
 public:
  std::string name() const override { return "faulting"; }
  std::string summary() const override { return "test family with a variant that writes to an illegal address"; }
  std::vector<std::string> source_files() const override { return {}; }
  const Space& space() const override { return space_; }
  std::vector<Problem> problem_classes() const override { return {Problem{"f32", {{"n", 300}}}}; }
  void check_problem(const Problem&) const override {}
  Config default_config(const Problem&) const override { return Config({{"mode", 0}}); }
  bool is_valid(const Config&, const Problem&, const DeviceLimits&, std::string*) const override { return true; }
  Rendered render(const Config& c, const Problem&) const override {
    Rendered r;
    r.source = R"(
template <int MODE>
__global__ void faulting(const float* x, float* y, long long n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (MODE == 1 && i == 0) *reinterpret_cast<volatile float*>(static_cast<unsigned long long>(n) << 40) = 1.0f;
  if (i < n) y[i] = 2.0f * x[i];
}
)";
    r.kernels = {"faulting<" + std::to_string(c.at("mode")) + ">"};
    return r;
  }
  Workload make_workload(const Problem& p, std::uint64_t seed) const override {
    return test::doubling_workload(p, seed);
  }
  std::vector<BufferShape> buffer_shapes(const Problem& p) const override { return test::doubling_shapes(p); }
  std::vector<Launch> plan(const Config&, const Problem& p, const std::vector<std::uint64_t>& a,
                           const DeviceLimits&) const override {
    Launch l;
    l.grid = {static_cast<unsigned>((p.dim("n") + 127) / 128), 1, 1};
    l.block = {128, 1, 1};
    l.args.add(a[0]).add(a[1]).add(static_cast<long long>(p.dim("n")));
    return {std::move(l)};
  }
  double flops(const Problem& p) const override { return static_cast<double>(p.dim("n")); }
  double bytes(const Problem& p) const override { return 8.0 * static_cast<double>(p.dim("n")); }

 private:
  Space space_{{{"mode", {0, 1}, "0: correct; 1: writes to an illegal address"}}};
};

const FaultingFamily kFaulting;

}  // namespace

TEST_CASE("isolated GPU runner: after an illegal address the next variant runs in a fresh worker",
          "[gpu][session]") {
  test::skip_without_gpu();
  IsolationOptions isolation;
  isolation.extra_families = {&kFaulting};
  auto runner = make_isolated_runner([] { return make_gpu_runner(); }, isolation);
  const Problem problem = kFaulting.problem_classes().front();
  CHECK(runner->run(kFaulting, Config({{"mode", 0}}), problem, RunOptions{}).ok);
  const RunResult fault = runner->run(kFaulting, Config({{"mode", 1}}), problem, RunOptions{});
  INFO(fault.failure);
  CHECK_FALSE(fault.ok);
  CHECK_THAT(fault.failure, Catch::StartsWith("launch: ") && Catch::EndsWith("; worker restarted"));
  for (int i = 0; i < 2; ++i) {
    const RunResult after = runner->run(kFaulting, Config({{"mode", 0}}), problem, RunOptions{});
    INFO(after.failure);
    CHECK(after.ok);
  }
}

TEST_CASE("a tuning session on the GPU, in a worker process, finds a config no slower than the default",
          "[gpu][session]") {
  test::skip_without_gpu();
  auto runner = make_isolated_runner([] { return make_gpu_runner(); });
  const auto& family = templates::find_family("adamw_single");
  const Problem p{"f32", {{"tensors", 4}, {"numel", 1 << 20}}};
  TuneOptions o;
  o.run.time = true;
  const auto s = tune(family, p, *runner, o);
  REQUIRE(s.best);
  CHECK(s.failures == 0);
  CHECK(s.evaluations == family.space().size());
  // The winner rule may prefer a tied, lower-index config, but never one
  // clearly slower than the default.
  CHECK(s.best->result.timing->median_ms <= s.default_run->result.timing->p80_ms * 1.05);
}

}  // namespace tuner_run_isolated_runner_gpu_test
