// Activation recomputation on the cpu backend: a run that keeps only each
// block's input and first norm, and runs each block's forward again before
// its backward, takes the steps of a run that keeps every activation, to the
// bit (the same ops on the same values); its memory plan, which the backend
// allocates exactly, keeps one block's slot and every block's kept part.
#include <catch2/catch.hpp>

#include "model/memory_plan.hpp"
#include "model/recompute_check.hpp"
#include "model/tiny_run.hpp"
#include "model/train.hpp"
#include "model/walk.hpp"

namespace model_recompute_test {

using namespace ktune;
using namespace ktune::model;

namespace {

// The head_dim-80 model of the 2.7B size, cut down: 3 heads, context 13, and
// three blocks, so two are recomputed (the last block's activations are the
// forward's own).
ModelConfig odd_model() {
  ModelConfig c;
  c.name = "odd";
  c.vocab = 97;
  c.d_model = 240;
  c.d_ff = 320;
  c.layers = 3;
  c.heads = 3;
  return c;
}

void check_same_steps(const test::RecomputeRun& kept, const test::RecomputeRun& recomputed) {
  REQUIRE(kept.losses.size() == recomputed.losses.size());
  for (std::size_t s = 0; s < kept.losses.size(); ++s) {
    INFO("step " << s + 1);
    CHECK(recomputed.losses[s] == kept.losses[s]);
    CHECK(test::differing(recomputed.gradients[s], kept.gradients[s]) == 0);
  }
  CHECK(test::differing(recomputed.parameters, kept.parameters) == 0);
}

}  // namespace

TEST_CASE("recompute: the cpu backend's losses, gradients and AdamW steps are a keeping run's, to the bit",
          "[model][recompute]") {
  BackendOptions cpu;
  cpu.threads = 2;
  SECTION("tiny, batch 2, context 16") {
    const auto [kept, recomputed] = test::recompute_pair(model_config("tiny"), RunShape{2, 16}, cpu, 3, 11);
    check_same_steps(kept, recomputed);
  }
  SECTION("head_dim 80, three blocks, context 13") {
    const auto [kept, recomputed] = test::recompute_pair(odd_model(), RunShape{2, 13}, cpu, 2, 12);
    check_same_steps(kept, recomputed);
  }
  SECTION("two micro-batches a step") {
    const auto [kept, recomputed] = test::recompute_pair(model_config("tiny"), RunShape{1, 16, 2}, cpu, 2, 13);
    check_same_steps(kept, recomputed);
  }
}

TEST_CASE("recompute: training with it takes the losses of training without", "[model][recompute][train]") {
  TrainOptions plain = test::tiny_run(4);
  TrainOptions recomputing = plain;
  recomputing.shape.recompute = true;
  const auto a = train(plain), b = train(recomputing);
  REQUIRE(a.size() == 4);
  REQUIRE(b.size() == 4);
  for (std::size_t s = 0; s < a.size(); ++s) {
    INFO("step " << a[s].step);
    CHECK(b[s].loss == a[s].loss);
  }
}

TEST_CASE("recompute: the plan keeps every block's input and first norm and one shared slot, as allocated",
          "[model][recompute][memory]") {
  for (const Precision precision : {Precision::kF32, Precision::kBf16}) {
    INFO(to_string(precision));
    const ModelConfig xl = model_config("xl");
    const RunShape keep{4, 512}, recompute{4, 512, 1, true};
    const MemoryPlan a = plan_memory(xl, keep, 1, 4, AttentionSaved::kProbabilities, precision);
    const MemoryPlan b = plan_memory(xl, recompute, 1, 4, AttentionSaved::kProbabilities, precision);
    // x_in and ln1 in the activations' dtype, rstd1 fp32, each start aligned to 64 bytes.
    const std::int64_t N = 4 * 512, C = xl.d_model, act = precision == Precision::kBf16 ? 2 : 4;
    CHECK(b.per_layer_kept == 2 * N * C * act + N * 4);
    CHECK(b.per_layer_activations == a.per_layer_activations);
    CHECK(a.activations_backward - b.activations_backward ==
          (xl.layers - 1) * (a.per_layer_activations - a.per_layer_kept));
    CHECK(b.activations_forward == a.activations_forward);
    CHECK(b.workspace_backward == a.workspace_backward);
    CHECK(b.peak_step() < a.peak_step());
  }
  // The cpu backend allocates the plan.
  for (const RunShape shape : {RunShape{2, 13, 1, true}, RunShape{3, 16, 2, true}}) {
    INFO("ctx " << shape.context);
    const ModelConfig tiny = model_config("tiny");
    Transformer<float> model(tiny, shape, Allocation::kTrain, 2);
    const MemoryPlan p = plan_memory(tiny, shape, 2);
    CHECK(model.allocated_bytes() == p.peak_forward_backward());
    const StepLayout L = step_layout(tiny, shape, 2, true);
    CHECK(L.region_elements(Region::kLayers) == (tiny.layers - 1) * L.layer.kept + L.layer.size);
    // Block l's kept buffers lie back to back; the shared slot's buffers after the last block's.
    CHECK(L.keep(1).offset == L.layer.kept);
    CHECK(L.act(0).offset + L.layer.q == tiny.layers * L.layer.kept);
    CHECK(L.act(1).offset == L.act(0).offset);
  }
}

}  // namespace model_recompute_test
