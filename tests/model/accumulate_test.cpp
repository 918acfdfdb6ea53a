// Gradient accumulation on the cpu backend: the gradients summed over a
// step's micro-batches are those of one batch of all their windows (the
// gradient of their mean loss), its training takes the steps a run of the
// whole batch takes, its memory plan keeps one (vocab, d_model) buffer more,
// and a backward that adds needs a run built for it.
#include <catch2/catch.hpp>

#include <cmath>

#include "model/accumulate_check.hpp"
#include "model/device_check.hpp"
#include "model/memory_plan.hpp"
#include "model/parameters.hpp"
#include "model/tiny_run.hpp"
#include "model/train.hpp"
#include "model/walk.hpp"
#include "support.hpp"

namespace model_accumulate_test {

using namespace ktune;
using namespace ktune::model;

TEST_CASE("gradient accumulation: K micro-batches' summed gradients are one batch of their windows'",
          "[model][accumulate]") {
  const ModelConfig config = model_config("tiny");
  for (const RunShape shape : {RunShape{2, 16, 3}, RunShape{1, 13, 2}}) {
    INFO("batch " << shape.batch << " x " << shape.micro_batches << ", ctx " << shape.context);
    std::vector<std::int32_t> tokens, targets, other, other_targets;
    test::random_tokens(shape.step_tokens(), config.vocab, 5, tokens, targets);
    BackendOptions cpu;
    cpu.threads = 2;
    auto rt = make_runtime(config, shape, Allocation::kTrain, cpu);
    std::vector<float> params(static_cast<std::size_t>(rt->layout().total));
    init_parameters<float>(rt->layout(), params.data(), 7);
    rt->set_parameters(params);
    // A step before leaves its gradients: the next step's first backward writes over them.
    test::random_tokens(shape.tokens(), config.vocab, 6, other, other_targets);
    rt->forward(other, other_targets);
    rt->backward();
    const auto got = test::accumulate_step(*rt, shape, tokens, targets);
    const auto want = test::whole_batch_step(config, shape, params, tokens, targets);
    CHECK(got.loss == Approx(want.loss).epsilon(1e-6));
    for (const auto& t : rt->layout().tensors) {
      INFO(t.name);
      CHECK(test::rel_l2(got.grads, want.grads, t.offset, t.numel) <= 1e-5);
    }
  }
}

TEST_CASE("gradient accumulation: training --batch B over K micro-batches takes the steps of --batch K x B",
          "[model][accumulate][train]") {
  TrainOptions whole = test::tiny_run(5);
  whole.shape = RunShape{4, 16};
  whole.hyper.max_grad_norm = 0.5f;  // clipping sees the step's gradient, not a micro-batch's
  TrainOptions micro = whole;
  micro.shape = RunShape{2, 16, 2};
  micro.save = (ktune::test::scratch_dir("accumulate") / "micro.safetensors").string();
  whole.save = (ktune::test::scratch_dir("accumulate") / "whole.safetensors").string();
  const auto a = train(whole), b = train(micro);
  REQUIRE(a.size() == 5);
  REQUIRE(b.size() == 5);
  for (std::size_t s = 0; s < a.size(); ++s) {
    INFO("step " << a[s].step);
    CHECK(b[s].loss == Approx(a[s].loss).epsilon(1e-5));
  }
  CHECK(b.back().loss < 0.9 * b.front().loss);  // it learns
  RunOptions e = whole;
  e.weights = whole.save;
  const double whole_loss = evaluate(e, false, 2).loss;
  e.weights = micro.save;
  CHECK(evaluate(e, false, 2).loss == Approx(whole_loss).epsilon(1e-5));
}

TEST_CASE("gradient accumulation: the plan keeps one (vocab, d_model) fp32 buffer more, after the others",
          "[model][accumulate][memory]") {
  const ModelConfig config = model_config("small");
  const RunShape one{4, 256}, four{4, 256, 4};
  for (const Precision precision : {Precision::kF32, Precision::kBf16}) {
    INFO(to_string(precision));
    const MemoryPlan a = plan_memory(config, one, 1, 4, AttentionSaved::kLogSumExp, precision);
    const MemoryPlan b = plan_memory(config, four, 1, 4, AttentionSaved::kLogSumExp, precision);
    CHECK(b.workspace_backward - a.workspace_backward == config.vocab * config.d_model * 4);
    CHECK(b.workspace_forward == a.workspace_forward);
    CHECK(b.activations_backward == a.activations_backward);
    const WorkspaceLayout wa = workspace_layout(config, one, 1, true, precision);
    const WorkspaceLayout wb = workspace_layout(config, four, 1, true, precision);
    CHECK(wb.dq == wa.dq);
    CHECK(wb.norm_dw == wa.norm_dw);
    CHECK(wb.dparam == wa.size);
    CHECK(qkv_fusable(config, four, precision, AttentionSaved::kLogSumExp) ==
          qkv_fusable(config, one, precision, AttentionSaved::kLogSumExp));
  }
  CHECK_THROWS_WITH((RunShape{4, 256, 0}.validate()), Catch::Contains("micro-batches per step must be positive"));
}

TEST_CASE("gradient accumulation: a backward adds only in a run built for micro-batches", "[model][accumulate]") {
  BackendOptions cpu;
  auto rt = make_runtime(model_config("tiny"), RunShape{1, 8}, Allocation::kTrain, cpu);
  std::vector<std::int32_t> tokens(8, 1), targets(8, 2);
  rt->forward(tokens, targets);
  CHECK_THROWS_WITH(rt->backward(true), Catch::Contains("several micro-batches a step"));
}

}  // namespace model_accumulate_test
