// The runner over an execution backend, run on the emulation: a problem its
// family accepts but whose inputs and CPU reference do not fit in host
// memory is refused in one line naming the problem and the bytes it needs,
// not with the allocation's own exception.
#include <catch2/catch.hpp>

#include <memory>
#include <new>
#include <stdexcept>
#include <vector>

#include "base/error.hpp"
#include "templates/family.hpp"
#include "templates/render.hpp"
#include "tuner/run/doubling_workload.hpp"
#include "tuner/run/emu_runner.hpp"
#include "tuner/run/recording_backend.hpp"

namespace tuner_run_backend_runner_emu_test {

using namespace ktune;
using namespace ktune::templates;
using namespace ktune::tuner;

namespace {

/// y = 2x over n floats.
class DoublingFamily : public Family {
 public:
  std::string name() const override { return "doubling"; }
  std::string summary() const override { return "test family: y = 2x"; }
  std::vector<std::string> source_files() const override { return {}; }
  const Space& space() const override { return space_; }
  std::vector<Problem> problem_classes() const override { return {Problem{"f32", {{"n", 300}}}}; }
  void check_problem(const Problem&) const override {}
  Config default_config(const Problem&) const override { return Config({{"threads", 64}}); }
  bool is_valid(const Config&, const Problem&, const DeviceLimits&, std::string*) const override { return true; }
  Rendered render(const Config&, const Problem&) const override {
    Rendered r;
    r.source = R"(
__global__ void doubled(const float* x, float* y, long long n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i];
}
)";
    r.kernels = {"doubled"};
    return r;
  }
  Workload make_workload(const Problem& p, std::uint64_t seed) const override {
    return test::doubling_workload(p, seed);
  }
  std::vector<Launch> plan(const Config& c, const Problem& p, const std::vector<std::uint64_t>& a,
                           const DeviceLimits&) const override {
    Launch l;
    const auto threads = static_cast<unsigned>(c.at("threads"));
    l.grid = {static_cast<unsigned>((p.dim("n") + threads - 1) / threads), 1, 1};
    l.block = {threads, 1, 1};
    l.args.add(a[0]).add(a[1]).add(static_cast<long long>(p.dim("n")));
    return {std::move(l)};
  }
  double flops(const Problem& p) const override { return static_cast<double>(p.dim("n")); }
  double bytes(const Problem& p) const override { return 8.0 * static_cast<double>(p.dim("n")); }
  // A table of which the kernel reads a part (as an embedding's): the host holds more than the traffic.
  std::vector<BufferShape> buffer_shapes(const Problem& p) const override {
    return {buffer_shape("x", Role::kInput, DType::kF32, p.dim("n")),
            buffer_shape("y", Role::kOutput, DType::kF32, p.dim("n")),
            buffer_shape("table", Role::kInput, DType::kF32, 2 * p.dim("n"))};
  }

 private:
  Space space_{{{"threads", {64}, ""}}};
};

/// A workload of more than 2^20 elements cannot be made (as an allocation past host memory fails): n = 2^21 throws
/// std::bad_alloc, larger n std::length_error (a vector past max_size()).
class UnmakeableFamily final : public DoublingFamily {
 public:
  std::string name() const override { return "unmakeable"; }
  std::string summary() const override { return "test family whose large workloads cannot be made"; }
  Workload make_workload(const Problem& p, std::uint64_t seed) const override {
    if (p.dim("n") == std::int64_t{1} << 21) throw std::bad_alloc();
    if (p.dim("n") > std::int64_t{1} << 21) throw std::length_error("cannot create std::vector larger than max_size()");
    return DoublingFamily::make_workload(p, seed);
  }
};

/// Timed runs start from x = 7 everywhere (HostBuffer::timed), the check's from the workload's random x.
class TimedInputFamily final : public DoublingFamily {
 public:
  Workload make_workload(const Problem& p, std::uint64_t seed) const override {
    Workload w = DoublingFamily::make_workload(p, seed);
    w.buffers[0].timed = make_buffer("x", Role::kInput, DType::kF32,
                                     std::vector<float>(static_cast<std::size_t>(p.dim("n")), 7.0f))
                             .bytes;
    return w;
  }
};

}  // namespace

TEST_CASE("a problem whose workload does not fit in host memory is refused naming it and the bytes it needs",
          "[emu][run]") {
  const UnmakeableFamily f;
  auto runner = make_emu_runner(EmuOptions{1, "sm_80"});
  const Config c = f.default_config(f.problem_classes().front());
  const auto run = [&](std::int64_t n) { return runner->run(f, c, Problem{"f32", {{"n", n}}}, RunOptions{}); };
  for (const std::int64_t n : {std::int64_t{1} << 21, std::int64_t{1} << 40}) {
    INFO("n " << n);
    try {
      run(n);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kInvalidInput);
      CHECK_THAT(e.what(), Catch::StartsWith("unmakeable f32;n=" + std::to_string(n) +
                                             ": too large to check on this host: its inputs and the CPU reference's "
                                             "results need at least " +
                                             std::to_string(16 * n) + " bytes ("));
      CHECK_THAT(e.what(), Catch::EndsWith("GiB) of host memory, more than it gives; check a smaller problem"));
    }
  }
  CHECK(run(300).ok);  // the runner goes on
}

TEST_CASE("backend runner emu: an in-place family is timed from its inputs as uploaded, restored before each "
          "repetition (grad_norm's clip scales in every one)",
          "[runner]") {
  // The workload's gradients have a norm well above its max_norm 1: clipped in place once, they would need no
  // scaling after, and the scale launch of every later repetition would return at once.
  const Family& f = find_family("grad_norm");
  const Problem p{"f32", {{"tensors", 2}, {"numel", 4096}, {"in_place", 1}}};
  auto recording = std::make_unique<test::RecordingBackend>();
  std::vector<float> norms;  // what each timed launch found
  recording->after_timed_launch = [&](test::RecordingBackend& b) {
    float out[2];
    b.download(out, b.buffer("out"), sizeof out);
    norms.push_back(out[0]);
  };
  const test::RecordingBackend& seen = *recording;
  auto runner = make_backend_runner(std::move(recording));
  RunOptions options;
  options.time = true;
  options.warmup = 1;
  options.min_repetitions = options.max_repetitions = 4;
  options.min_seconds = 1e6;  // all 4, however long a loaded host takes (the emulation stops past min_seconds)
  const RunResult r = runner->run(f, f.default_config(p), p, options);
  INFO(r.failure);
  REQUIRE(r.ok);
  REQUIRE(r.timing);
  CHECK_THAT(r.timing->method, Catch::Contains("in-place buffers restored before each, untimed"));
  REQUIRE(norms.size() == 5);  // the warm-up and 4 repetitions
  CHECK(norms[0] > 10.0f);
  for (const float n : norms) CHECK(n == norms[0]);
  CHECK(seen.copies == 5 * 2);  // each gradient, before each

  // A family whose launches move the same bytes whatever their inputs hold is timed as it runs.
  const Family& adamw = find_family("adamw");
  const Problem q = adamw.problem_classes().front();
  auto plain = std::make_unique<test::RecordingBackend>();
  const test::RecordingBackend& plain_seen = *plain;
  auto plain_runner = make_backend_runner(std::move(plain));
  const RunResult a = plain_runner->run(adamw, adamw.default_config(q), q, options);
  INFO(a.failure);
  CHECK(a.ok);
  CHECK(plain_seen.copies == 0);
}

TEST_CASE("backend runner emu: a workload's inputs for timing are what its timed launches read, and its check "
          "reads the others",
          "[runner]") {
  const TimedInputFamily f;
  const Problem p{"f32", {{"n", 300}}};
  auto recording = std::make_unique<test::RecordingBackend>();
  std::vector<float> outputs;  // y[0] and y[299] after each timed launch
  recording->after_timed_launch = [&](test::RecordingBackend& b) {
    std::vector<float> y(300);
    b.download(y.data(), b.buffer("y"), y.size() * sizeof(float));
    outputs.push_back(y.front());
    outputs.push_back(y.back());
  };
  auto runner = make_backend_runner(std::move(recording));
  RunOptions options;
  options.time = true;
  options.warmup = 1;
  options.min_repetitions = options.max_repetitions = 2;
  const RunResult r = runner->run(f, f.default_config(p), p, options);
  INFO(r.failure);
  REQUIRE(r.ok);  // the check's x, against its expected y
  REQUIRE(outputs.size() == 2 * 3);
  for (const float y : outputs) CHECK(y == 14.0f);
}

}  // namespace tuner_run_backend_runner_emu_test
