// A deterministic run (BackendOptions::deterministic) repeats bit for bit
// where the order of blocks changes: the emulation runs them in order or
// last first (KTUNE_EMU_SCHEDULE), as a GPU runs them in an order of its
// own. Without it, the same runs differ in their last bits: compiled mode's
// flash attention backward adds dQ by atomics, eager's embedding backward is
// an index_add_ by atomics.
#include <catch2/catch.hpp>

#include <string>

#include "model/deterministic_check.hpp"
#include "support.hpp"

namespace model_deterministic_emu_test {

using namespace ktune::model;
using ktune::test::SavedRun;

namespace {

// A training run of `o`, the emulation's blocks in `order`.
SavedRun train_tiny(const TrainOptions& o, const char* order) {
  const ktune::test::ScopedEnv schedule("KTUNE_EMU_SCHEDULE", order);
  return ktune::test::train_saved(o, "deterministic_emu", order);
}

TrainOptions tiny(Mode mode, Precision precision, RunShape shape) {
  TrainOptions o;
  o.model = model_config("tiny");
  o.shape = shape;
  o.steps = 2;
  o.threads = 1;
  o.backend.backend = "emu";
  o.backend.mode = mode;
  o.backend.precision = precision;
  o.backend.emu_workers = 1;  // blocks one after another, in the schedule's order
  return o;
}

}  // namespace

TEST_CASE("emu backend: a deterministic training run repeats bit for bit whatever the order of blocks, "
          "the same runs without it differ",
          "[emu][model][deterministic][once]") {
  SECTION("compiled tf32: flash attention's dQ by a second pass, not by atomics") {
    // At ctx 256 a query's keys span several key tiles: dQ adds up across blocks. In tf32 it stays fp32 on its
    // way to the weights; in bf16 its rounding to bf16 hides the order of the sums in all but a few of this
    // size's values, and whether one reaches the weights is chance (the gpu twin runs bf16 at the small size).
    TrainOptions o = tiny(Mode::kCompiled, Precision::kTf32, RunShape{2, 256});
    const SavedRun in_order = train_tiny(o, "in-order"), reverse = train_tiny(o, "reverse");
    CHECK(in_order.weights != reverse.weights);
    CHECK_THAT(in_order.summary, !Catch::Contains("deterministic"));
    o.backend.deterministic = true;
    const SavedRun fixed_in_order = train_tiny(o, "in-order"), fixed_reverse = train_tiny(o, "reverse");
    CHECK(fixed_in_order.weights == fixed_reverse.weights);
    CHECK_THAT(fixed_in_order.summary,
               Catch::Contains("; deterministic: 1 kernel takes another config, one that sums in a fixed order"));
  }
  SECTION("eager f32: the embedding backward as its family's kernel, not an index_add_") {
    TrainOptions o = tiny(Mode::kEager, Precision::kF32, RunShape{2, 64});
    const SavedRun in_order = train_tiny(o, "in-order"), reverse = train_tiny(o, "reverse");
    CHECK(in_order.weights != reverse.weights);
    o.backend.deterministic = true;
    const SavedRun fixed_in_order = train_tiny(o, "in-order"), fixed_reverse = train_tiny(o, "reverse");
    CHECK(fixed_in_order.weights == fixed_reverse.weights);
    CHECK_THAT(fixed_in_order.summary, Catch::EndsWith("; deterministic"));
  }
}

}  // namespace model_deterministic_emu_test
