// A deterministic run on a GPU (BackendOptions::deterministic) repeats bit
// for bit: the small model's compiled bf16 steps at ctx 256 (flash
// attention's dQ by a second pass, no GEMM algorithm chosen by timing) and
// the tiny model's eager f32 steps (the embedding backward as its family's
// kernel), each run twice, give the same weights. Skipped without a device.
#include <catch2/catch.hpp>

#include "model/deterministic_check.hpp"

namespace model_deterministic_gpu_test {

using namespace ktune::model;

TEST_CASE("cuda backend: a deterministic training run gives the same weights, byte for byte, run after run",
          "[gpu][model][deterministic]") {
  ktune::test::skip_without_gpu();
  TrainOptions o;
  o.steps = 3;
  o.backend.backend = "cuda";
  o.backend.deterministic = true;
  SECTION("compiled bf16, the small model at ctx 256") {
    o.model = model_config("small");
    o.shape = RunShape{2, 256};
    o.backend.precision = Precision::kBf16;
    const auto first = ktune::test::train_saved(o, "deterministic_gpu", "compiled-1");
    const auto second = ktune::test::train_saved(o, "deterministic_gpu", "compiled-2");
    CHECK(first.weights == second.weights);
    CHECK_THAT(first.summary,
               Catch::Contains("; deterministic: 1 kernel takes another config, one that sums in a fixed order") &&
                   Catch::Contains("cuBLASLt (algorithms chosen as each GEMM first runs: the tuned cache's, else the "
                                   "heuristic's first, untimed)"));
  }
  SECTION("eager f32, the tiny model") {
    o.model = model_config("tiny");
    o.shape = RunShape{4, 64};
    o.backend.mode = Mode::kEager;
    const auto first = ktune::test::train_saved(o, "deterministic_gpu", "eager-1");
    const auto second = ktune::test::train_saved(o, "deterministic_gpu", "eager-2");
    CHECK(first.weights == second.weights);
    CHECK_THAT(first.summary, Catch::EndsWith("; deterministic"));
  }
}

}  // namespace model_deterministic_gpu_test
