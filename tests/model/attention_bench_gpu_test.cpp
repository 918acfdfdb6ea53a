// The twin of attention_bench_emu_test.cpp on a GPU: eager attention's
// GEMMs on cuBLASLt, checked against the reference, then timed, at small
// ragged shapes and at one of seed 003's (seq 4096, where the check samples
// rows). Skipped without a device.
#include <catch2/catch.hpp>

#include "model/attention_bench.hpp"
#include "support.hpp"
#include "tuner/exec/backend.hpp"

namespace model_attention_bench_gpu_test {

using namespace ktune;

templates::Problem problem(const std::string& dtype, std::int64_t batch, std::int64_t heads, std::int64_t seq,
                           std::int64_t head_dim, bool causal) {
  return {dtype, {{"batch", batch}, {"heads", heads}, {"seq", seq}, {"head_dim", head_dim}, {"causal", causal}}};
}

TEST_CASE("cuda backend: eager attention is checked against the reference, then timed", "[gpu][model]") {
  test::skip_without_gpu();
  auto backend = tuner::exec::make_cuda_backend();
  tuner::RunOptions options;
  options.max_repetitions = 5;
  for (const auto& p : {problem("f32", 2, 3, 257, 80, true), problem("bf16", 2, 2, 100, 64, false),
                        problem("bf16", 8, 1, 4096, 128, true), problem("f32", 8, 1, 4096, 16, false)}) {
    INFO(p.key());
    const auto r = model::bench_eager_attention(*backend, p, options);
    const double tolerance = p.dtype == "f32" ? 1e-5 : 1e-2;
    CHECK(r.o_error <= tolerance);
    CHECK(r.dq_error <= tolerance);
    CHECK(r.dk_error <= tolerance);
    CHECK(r.dv_error <= tolerance);
    CHECK(r.forward.median_ms > 0);
    CHECK(r.backward.median_ms > 0);
    CHECK(r.gemms.find("cuBLASLt") != std::string::npos);
  }
}

}  // namespace model_attention_bench_gpu_test
