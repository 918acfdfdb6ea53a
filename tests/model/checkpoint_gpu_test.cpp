// Checkpoints on a GPU: a cuda runtime's parameters and AdamW state go to a
// checkpoint and come back into another one exactly, and the two then take
// the same step. Skipped without a device.
#include "model/checkpoint.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "model/data.hpp"
#include "model/device_check.hpp"
#include "model/parameters.hpp"
#include "support.hpp"

namespace model_checkpoint_gpu_test {

using namespace ktune;
using namespace ktune::model;

TEST_CASE("cuda backend: a checkpoint restores parameters, AdamW's moments and step exactly",
          "[gpu][model][checkpoint]") {
  test::skip_without_gpu();
  const auto path = test::scratch_dir("checkpoint-gpu") / "run.ckpt";
  const ModelConfig config = model_config("tiny");
  const RunShape shape{2, 24};
  BackendOptions b;
  b.backend = "cuda";
  b.mode = Mode::kEager;  // the heuristic's first GEMM algorithm in both runtimes: the same step in each
  b.precision = Precision::kBf16;
  const auto stream = TokenStream::synthetic(config.vocab, 3);
  std::mt19937_64 sampler(3);
  std::vector<std::int32_t> tokens, targets;
  templates::adamw::AdamwHyper hyper;
  hyper.max_grad_norm = 1.0f;

  auto first = make_runtime(config, shape, Allocation::kTrain, b);
  std::vector<float> init(static_cast<std::size_t>(first->layout().total));
  init_parameters<float>(first->layout(), init.data(), 3);
  first->set_parameters(init);
  for (int s = 0; s < 2; ++s) {
    stream.sample(shape, sampler, tokens, targets);
    first->forward(tokens, targets);
    first->backward();
    first->step(hyper);
  }
  write_checkpoint(path, *first, {2, 3, sampler, "", stream.size(), RunShape{0, 0, 0}, std::nullopt, "", {}, {}});

  auto second = make_runtime(config, shape, Allocation::kTrain, b);
  const CheckpointInfo info = load_checkpoint(path, *second);
  CHECK(info.step == 2);
  CHECK(info.sampler == sampler);
  CHECK(test::differing(second->parameters(), first->parameters()) == 0);
  const OptimizerState a = first->optimizer_state(), c = second->optimizer_state();
  CHECK(c.steps == 2);
  CHECK(c.exp_avg == a.exp_avg);
  CHECK(c.exp_avg_sq == a.exp_avg_sq);

  stream.sample(shape, sampler, tokens, targets);
  const double loss_a = first->forward(tokens, targets), loss_c = second->forward(tokens, targets);
  CHECK(loss_c == Approx(loss_a).epsilon(1e-6));
  for (auto* rt : {first.get(), second.get()}) {
    rt->backward();
    rt->step(hyper);
  }
  const auto pa = first->parameters(), pc = second->parameters();
  double worst = 0;
  for (std::size_t i = 0; i < pa.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(pa[i]) - pc[i]));
  CHECK(worst < 1e-6);  // the third step's update, from the same moments and step count
}

}  // namespace model_checkpoint_gpu_test
