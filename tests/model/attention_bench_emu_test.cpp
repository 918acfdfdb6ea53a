#include <catch2/catch.hpp>

#include "base/error.hpp"
#include "model/attention_bench.hpp"
#include "tuner/exec/backend.hpp"

namespace model_attention_bench_emu_test {

using namespace ktune;

templates::Problem problem(const std::string& dtype, std::int64_t batch, std::int64_t heads, std::int64_t seq,
                           std::int64_t head_dim, bool causal) {
  return {dtype, {{"batch", batch}, {"heads", heads}, {"seq", seq}, {"head_dim", head_dim}, {"causal", causal}}};
}

tuner::RunOptions once() {
  tuner::RunOptions o;
  o.warmup = 0;
  o.min_repetitions = 1;
  o.max_repetitions = 1;
  o.min_seconds = 0;
  return o;
}

TEST_CASE("eager attention (materialised, as eager mode runs it) is checked against the reference, then timed",
          "[model][emu]") {
  auto backend = tuner::exec::make_emu_backend({1, "sm_80"});
  // Ragged lengths, a head dim of the 2.7B model, causal and not, f32 and bf16.
  for (const auto& p : {problem("f32", 2, 1, 37, 16, false), problem("f32", 1, 3, 21, 80, true),
                        problem("bf16", 2, 2, 33, 64, true), problem("bf16", 1, 1, 9, 32, false)}) {
    INFO(p.key());
    const auto r = model::bench_eager_attention(*backend, p, once());
    const double tolerance = p.dtype == "f32" ? 1e-5 : 1e-2;
    CHECK(r.o_error <= tolerance);
    CHECK(r.dq_error <= tolerance);
    CHECK(r.dk_error <= tolerance);
    CHECK(r.dv_error <= tolerance);
    CHECK(r.forward.median_ms > 0);
    CHECK(r.backward.median_ms > 0);
    const double b = p.dim("batch"), h = p.dim("heads"), s = p.dim("seq"), d = p.dim("head_dim");
    CHECK(r.memory_after_forward_bytes == (4 * b * s * h * d + b * h * s * s) * (p.dtype == "f32" ? 4 : 2));
    CHECK(r.gemms.find("host") != std::string::npos);
  }
}

TEST_CASE("eager attention refuses what the runtime does not run", "[model][emu]") {
  auto backend = tuner::exec::make_emu_backend({1, "sm_80"});
  CHECK_FALSE(model::eager_attention_supports(problem("f16", 1, 1, 8, 16, true)));
  auto grouped = problem("bf16", 1, 4, 8, 16, true);
  grouped.dims["kv_heads"] = 2;
  CHECK_FALSE(model::eager_attention_supports(grouped));
  CHECK(model::eager_attention_supports(problem("bf16", 1, 4, 8, 16, true)));
  CHECK_THROWS_AS(model::bench_eager_attention(*backend, problem("f16", 1, 1, 8, 16, true), once()), Error);
}

}  // namespace model_attention_bench_emu_test
