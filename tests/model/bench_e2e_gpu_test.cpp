// The end-to-end benchmark on a GPU: CUDA-event phase times, the measured
// peak device memory beside the plan's, compiled mode's GEMM choices written
// to the cache and read back without timing, each op profiled with CUDA
// events, and a plan too large for the GPU refused before anything is
// allocated. Skipped without a device.
#include "model/bench_e2e.hpp"

#include <catch2/catch.hpp>

#include "base/error.hpp"
#include "cache/store.hpp"
#include "support.hpp"

namespace model_bench_e2e_gpu_test {

using namespace ktune;
using namespace ktune::model;

TEST_CASE("bench e2e on cuda: events, measured memory, GEMM choices cached", "[gpu][model][bench]") {
  test::skip_without_gpu();
  const auto cache = test::scratch_dir("bench_e2e_gpu") / "tuned.json";
  cache::CacheFile(cache).update([](std::vector<cache::Entry>&) { return true; });  // an empty cache file
  E2eOptions o;
  o.backend.backend = "cuda";
  o.backend.mode = Mode::kCompiled;
  o.backend.precision = Precision::kF32;  // compiled fp32: attention materialised (below)
  o.backend.cache = cache.string();
  o.model = model_config("tiny");
  o.shape = RunShape{2, 32};
  o.warmup = 1;
  o.trials = 2;
  o.passes = E2ePasses::kStep;
  const E2eResult first = bench_e2e(o);
  CHECK(first.clock == "CUDA events on the stream");
  REQUIRE(first.device_peak_bytes.has_value());
  CHECK(*first.device_peak_bytes >= first.plan_peak_bytes);
  CHECK_FALSE(first.driver.empty());
  CHECK_THAT(first.kernels, Catch::Contains("0 from the tuned cache") && !Catch::Contains(" 0 timed now"));
  std::size_t gemms = 0;
  for (const auto& e : cache::CacheFile(cache).load_input()) gemms += e.key.family == "gemm";
  CHECK(gemms > 0);

  o.profile = true;  // the second run profiles its ops with CUDA events as well
  const E2eResult second = bench_e2e(o);
  CHECK_THAT(second.kernels, Catch::Contains(" 0 timed now"));
  CHECK(second.loss == Approx(first.loss).epsilon(1e-5));
  REQUIRE(second.launches);
  std::int64_t gemm_ops = 0;
  double ops_ms = 0;
  for (const auto& row : second.profile) {
    gemm_ops += row.op == "gemm" ? row.calls : 0;
    REQUIRE(row.device_ms.size() == 2);
    CHECK(row.device_ms[0] >= 0);
    ops_ms += row.device_ms[0];
  }
  // fp32 compiled mode materialises attention: per layer and batch row, the forward's 2 GEMMs and the backward's 4
  // run inside the attention ops; every other GEMM launch is a profiled gemm op.
  CHECK(gemm_ops + 6 * o.shape.batch * o.model.layers == second.launches->gemms);
  // The ops fill the step between its marks: their sum is about the step (more: each mark costs a little).
  CHECK(ops_ms > 0.5 * second.step.median_ms);

  // A plan beyond the GPU's memory: one line, before anything is allocated.
  o.model = model_config("2.7B");
  o.shape = RunShape{512, 1024};
  o.backend.cache.clear();
  CHECK_THROWS_WITH(bench_e2e(o), Catch::Contains("of device memory (the plan's peak)") && Catch::Contains("free") &&
                                      Catch::Contains("32.0 MiB of it kept for cuBLASLt's workspace"));
}

}  // namespace model_bench_e2e_gpu_test
