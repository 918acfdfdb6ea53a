// `bench e2e --profile` on the emu backend: the cuda path's ops, each timed,
// in compiled mode (flash attention, fused kernels) and eager mode (attention
// by GEMMs inside its op), and compiled fp32 (attention by GEMMs too).
#include <catch2/catch.hpp>

#include "model/bench_e2e.hpp"

namespace model_profiled_ops_emu_test {

using namespace ktune::model;

TEST_CASE("emu backend: bench e2e --profile times each op, and compiled mode's GEMM ops are its GEMM launches",
          "[emu][model][profile]") {
  E2eOptions o;
  o.backend.backend = "emu";
  o.model = model_config("tiny");
  o.shape = RunShape{1, 12};
  o.warmup = 0;
  o.trials = 1;
  o.passes = E2ePasses::kStep;
  o.backend.precision = Precision::kBf16;
  o.profile = true;
  for (const Mode mode : {Mode::kCompiled, Mode::kEager}) {
    INFO(to_string(mode));
    o.backend.mode = mode;
    const E2eResult r = bench_e2e(o);
    REQUIRE(r.launches);
    std::int64_t gemm_ops = 0, attention_ops = 0;
    double total_ms = 0;
    for (const auto& row : r.profile) {
      gemm_ops += row.op == "gemm" ? row.calls : 0;
      attention_ops += row.op.starts_with("attention_") ? row.calls : 0;
      REQUIRE(row.device_ms.size() == 1);
      total_ms += row.device_ms[0];
    }
    CHECK(attention_ops == 2 * o.model.layers);
    // Compiled mode's attention is flash attention, no GEMM; eager mode's launches its GEMMs inside its op.
    if (mode == Mode::kCompiled)
      CHECK(gemm_ops == r.launches->gemms);
    else
      CHECK(gemm_ops < r.launches->gemms);
    CHECK(total_ms > 0);
  }

  // fp32 compiled mode materialises attention: per layer and batch row, the forward's 2 GEMMs and the backward's 4
  // run inside the attention ops, and every other GEMM launch is a profiled gemm op.
  o.backend.mode = Mode::kCompiled;
  o.backend.precision = Precision::kF32;
  o.shape = RunShape{2, 12};
  const E2eResult r = bench_e2e(o);
  REQUIRE(r.launches);
  std::int64_t gemm_ops = 0;
  for (const auto& row : r.profile) gemm_ops += row.op == "gemm" ? row.calls : 0;
  CHECK(gemm_ops + 6 * o.shape.batch * o.model.layers == r.launches->gemms);
}

}  // namespace model_profiled_ops_emu_test
