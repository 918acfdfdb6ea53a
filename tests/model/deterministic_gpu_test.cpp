// A deterministic run on a GPU (BackendOptions::deterministic) repeats bit
// for bit: the small model's compiled bf16 steps at ctx 256 (flash
// attention's dQ by a second pass, no GEMM algorithm chosen by timing) and
// the tiny model's eager f32 steps (the embedding backward as its family's
// kernel), each run twice, give the same weights. Skipped without a device.
#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>
#include <string>

#include "model/train.hpp"
#include "support.hpp"

namespace model_deterministic_gpu_test {

using namespace ktune::model;

namespace {

struct Run {
  std::string weights;  // the saved file's bytes
  std::string summary;  // the runtime's kernel summary
};

// A training run of `o`, its weights saved as `name`.
Run train_saved(TrainOptions o, const std::string& name) {
  o.save = (ktune::test::scratch_dir("deterministic_gpu") / (name + ".safetensors")).string();
  Run run;
  train(o, {}, [&](const TrainStart& start) { run.summary = start.runtime.kernel_summary(); });
  std::ifstream in(o.save, std::ios::binary);
  run.weights.assign(std::istreambuf_iterator<char>(in), {});
  REQUIRE(!run.weights.empty());
  return run;
}

}  // namespace

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
    const Run first = train_saved(o, "compiled-1"), second = train_saved(o, "compiled-2");
    CHECK(first.weights == second.weights);
    CHECK_THAT(first.summary, Catch::Contains("; deterministic: 1 of them changed to sum in a fixed order") &&
                                  Catch::Contains("cuBLASLt (untimed algorithms:"));
  }
  SECTION("eager f32, the tiny model") {
    o.model = model_config("tiny");
    o.shape = RunShape{4, 64};
    o.backend.mode = Mode::kEager;
    const Run first = train_saved(o, "eager-1"), second = train_saved(o, "eager-2");
    CHECK(first.weights == second.weights);
    CHECK_THAT(first.summary, Catch::EndsWith("; deterministic"));
  }
}

}  // namespace model_deterministic_gpu_test
