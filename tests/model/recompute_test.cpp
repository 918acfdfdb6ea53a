// Activation recomputation on the cpu backend: a run that keeps only each
// block's input and first norm, and runs each block's forward again before
// its backward, takes the steps of a run that keeps every activation, to the
// bit (the same ops on the same values); its memory plan, which the backend
// allocates exactly, keeps one block's slot and every block's kept part.
#include <catch2/catch.hpp>

#include "model/memory_plan.hpp"
#include "model/odd_model.hpp"
#include "model/recompute_check.hpp"
#include "model/runtime.hpp"
#include "model/tiny_run.hpp"
#include "model/train.hpp"
#include "model/walk.hpp"

namespace model_recompute_test {

using namespace ktune;
using namespace ktune::model;

namespace {

// The odd shape in three blocks, so two are recomputed (the last block's
// activations are the forward's own).
ModelConfig odd_model() { return test::odd_model(3); }

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
  for (const Recompute level : {Recompute::kSwiglu, Recompute::kBlocks}) {
    INFO("recompute " << to_string(level));
    {
      INFO("tiny, batch 2, context 16");
      const auto [kept, recomputed] = test::recompute_pair(model_config("tiny"), RunShape{2, 16}, cpu, 3, 11, level);
      check_same_steps(kept, recomputed);
    }
    {
      INFO("head_dim 80, three blocks, context 13");
      const auto [kept, recomputed] = test::recompute_pair(odd_model(), RunShape{2, 13}, cpu, 2, 12, level);
      check_same_steps(kept, recomputed);
    }
    {
      INFO("two micro-batches a step");
      const auto [kept, recomputed] = test::recompute_pair(model_config("tiny"), RunShape{1, 16, 2}, cpu, 2, 13, level);
      check_same_steps(kept, recomputed);
    }
  }
}

TEST_CASE("recompute: training with it takes the losses of training without", "[model][recompute][train]") {
  TrainOptions plain = test::tiny_run(4);
  const auto a = train(plain);
  REQUIRE(a.size() == 4);
  for (const Recompute level : {Recompute::kSwiglu, Recompute::kBlocks}) {
    INFO("recompute " << to_string(level));
    TrainOptions recomputing = plain;
    recomputing.shape.recompute = level;
    const auto b = train(recomputing);
    REQUIRE(b.size() == 4);
    for (std::size_t s = 0; s < a.size(); ++s) {
      INFO("step " << a[s].step);
      CHECK(b[s].loss == a[s].loss);
    }
  }
}

TEST_CASE("recompute: the plan keeps each block's kept part and one shared rest of a slot, as allocated",
          "[model][recompute][memory]") {
  for (const Precision precision : {Precision::kF32, Precision::kBf16}) {
    INFO(to_string(precision));
    const ModelConfig xl = model_config("xl");
    const RunShape keep{4, 512};
    const MemoryPlan a = plan_memory(xl, keep, 1, 4, AttentionSaved::kProbabilities, precision);
    const std::int64_t N = 4 * 512, C = xl.d_model, FF = xl.d_ff, act = precision == Precision::kBf16 ? 2 : 4;
    CHECK(a.per_layer_kept == a.per_layer_activations);
    for (const Recompute level : {Recompute::kSwiglu, Recompute::kBlocks}) {
      INFO("recompute " << to_string(level));
      const MemoryPlan b = plan_memory(xl, RunShape{4, 512, 1, level}, 1, 4, AttentionSaved::kProbabilities,
                                       precision);
      // kBlocks: x_in and ln1 in the activations' dtype, rstd1 fp32; kSwiglu: all but h. Each start aligned.
      CHECK(b.per_layer_kept == (level == Recompute::kBlocks ? 2 * N * C * act + N * 4
                                                             : a.per_layer_activations - N * FF * act));
      CHECK(b.per_layer_activations == a.per_layer_activations);
      CHECK(a.activations_backward - b.activations_backward ==
            (xl.layers - 1) * (a.per_layer_activations - b.per_layer_kept));
      CHECK(b.activations_forward == a.activations_forward);
      CHECK(b.workspace_backward == a.workspace_backward);
      CHECK(b.peak_step() < a.peak_step());
    }
  }
  // The cpu backend allocates the plan; the kept parts lie back to back, the shared rest after the last one.
  const ModelConfig tiny = model_config("tiny");
  for (const Recompute level : {Recompute::kSwiglu, Recompute::kBlocks}) {
    for (const RunShape shape : {RunShape{2, 13, 1, level}, RunShape{3, 16, 2, level}}) {
      INFO("recompute " << to_string(level) << ", ctx " << shape.context);
      Transformer<float> model(tiny, shape, Allocation::kTrain, 2);
      const MemoryPlan p = plan_memory(tiny, shape, 2);
      CHECK(model.allocated_bytes() == p.peak_forward_backward());
      const StepLayout L = step_layout(tiny, shape, 2, Allocation::kTrain);
      const std::int64_t kept = L.layer.kept(level);
      CHECK(L.region_elements(Region::kLayers) == (tiny.layers - 1) * kept + L.layer.size);
      CHECK(L.act(1, L.layer.x_in).offset == kept + L.layer.x_in);
      CHECK(L.act(1, L.layer.rstd1).offset == kept + L.layer.rstd1);
      CHECK(L.act(0, L.layer.h).offset == (tiny.layers - 1) * kept + L.layer.h);
      CHECK(L.act(1, L.layer.h).offset == L.act(0, L.layer.h).offset);
      const std::int64_t a1 = L.act(1, L.layer.a).offset;
      CHECK(a1 == (level == Recompute::kSwiglu ? kept + L.layer.a : L.act(0, L.layer.a).offset));
    }
  }
  CHECK(parse_recompute("swiglu") == Recompute::kSwiglu);
  CHECK_THROWS_WITH(parse_recompute("all"), Catch::Contains("accepted: none, swiglu, blocks"));
}

}  // namespace model_recompute_test

namespace model_recompute_test {

TEST_CASE("recompute auto: the least level whose plan fits the memory there is", "[model][recompute]") {
  const ModelConfig config = odd_model();
  BackendOptions cpu;
  cpu.threads = 2;
  RunShape shape{2, 13};
  const auto peak = [&](Recompute level, Allocation allocation) {
    RunShape s = shape;
    s.recompute = level;
    return plan_run(config, s, cpu).peak(allocation);
  };
  for (const Allocation fb : {Allocation::kTrain, Allocation::kGradients}) {
    INFO("forward and backward only: " << (fb == Allocation::kGradients));
    const std::int64_t none = peak(Recompute::kNone, fb), swiglu = peak(Recompute::kSwiglu, fb),
                       blocks = peak(Recompute::kBlocks, fb);
    REQUIRE(none > swiglu);
    REQUIRE(swiglu > blocks);
    shape.recompute = Recompute::kBlocks;  // not read
    CHECK(least_recompute(config, shape, cpu, none, fb) == Recompute::kNone);
    CHECK(least_recompute(config, shape, cpu, none - 1, fb) == Recompute::kSwiglu);
    CHECK(least_recompute(config, shape, cpu, swiglu, fb) == Recompute::kSwiglu);
    CHECK(least_recompute(config, shape, cpu, swiglu - 1, fb) == Recompute::kBlocks);
    CHECK(least_recompute(config, shape, cpu, blocks - 1, fb) == Recompute::kBlocks);  // the least there is
    CHECK(least_recompute(config, shape, cpu, 0, fb) == Recompute::kNone);              // not known
    shape.recompute = Recompute::kNone;
  }
  // The optimizer's state counts in a step's plan, not in a forward and backward's.
  const std::int64_t gradients = peak(Recompute::kNone, Allocation::kGradients);
  CHECK(least_recompute(config, shape, cpu, gradients, Allocation::kGradients) == Recompute::kNone);
  CHECK(least_recompute(config, shape, cpu, gradients, Allocation::kTrain) != Recompute::kNone);
}

}  // namespace model_recompute_test
