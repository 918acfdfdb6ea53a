#include <catch2/catch.hpp>

#include "base/error.hpp"
#include "model/eager_attention_check.hpp"
#include "support.hpp"
#include "tuner/exec/backend.hpp"

namespace model_attention_bench_emu_test {

using namespace ktune;
using test::attention_problem;

TEST_CASE("eager attention (materialised, as eager mode runs it) is checked against the reference, then timed",
          "[model][emu]") {
  auto backend = tuner::exec::make_emu_backend({1, "sm_80"});
  // Ragged lengths, a head dim of the 2.7B model, causal and not, f32 and bf16, one head over a batch.
  for (const auto& p : {attention_problem("f32", 2, 1, 37, 16, false), attention_problem("f32", 1, 3, 21, 80, true),
                        attention_problem("bf16", 2, 2, 33, 64, true), attention_problem("bf16", 1, 1, 9, 32, false)}) {
    const auto r = test::check_eager_attention(*backend, p, test::time_once(), "host");
    const double b = p.dim("batch"), h = p.dim("heads"), s = p.dim("seq"), d = p.dim("head_dim");
    CHECK(r.memory_after_forward_bytes == (4 * b * s * h * d + b * h * s * s) * (p.dtype == "f32" ? 4 : 2));
  }
}

TEST_CASE("eager attention refuses what the runtime does not run", "[model][emu]") {
  auto backend = tuner::exec::make_emu_backend({1, "sm_80"});
  CHECK_FALSE(model::eager_attention_supports(attention_problem("f16", 1, 1, 8, 16, true)));
  auto grouped = attention_problem("bf16", 1, 4, 8, 16, true);
  grouped.dims["kv_heads"] = 2;
  CHECK_FALSE(model::eager_attention_supports(grouped));
  CHECK(model::eager_attention_supports(attention_problem("bf16", 1, 4, 8, 16, true)));
  CHECK_THROWS_AS(model::bench_eager_attention(*backend, attention_problem("f16", 1, 1, 8, 16, true),
                                               test::time_once()),
                  Error);
}

}  // namespace model_attention_bench_emu_test
