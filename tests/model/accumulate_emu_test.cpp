// Gradient accumulation on the emulated device backend: a step of K
// micro-batches gives the cpu backend's gradients of one batch of all their
// windows (compiled and eager mode, fp32 and bf16 mixed precision), adds
// each non-GEMM gradient with one primitive launch, and replays its two
// backward passes (writing, adding) as graphs to the bit.
#include <catch2/catch.hpp>

#include <cmath>

#include "model/accumulate_check.hpp"
#include "model/device_check.hpp"
#include "model/parameters.hpp"

namespace model_accumulate_emu_test {

using namespace ktune;
using namespace ktune::model;

namespace {

// bf16 mixed precision against the cpu's fp32: device_model_emu_test.cpp's
// tolerances, explained there (a mean loss 2e-3, a gradient tensor 5e-2).
constexpr double kBf16LossTolerance = 2e-3;
constexpr double kBf16GradientTolerance = 5e-2;

std::unique_ptr<Runtime> emu_runtime(const ModelConfig& config, const RunShape& shape, Mode mode,
                                     Precision precision, bool graphs = false) {
  BackendOptions b;
  b.backend = "emu";
  b.mode = mode;
  b.precision = precision;
  b.graphs = graphs;
  return make_runtime(config, shape, Allocation::kTrain, b);
}

void check_matches_whole_batch(const RunShape& shape, Mode mode, Precision precision) {
  INFO("batch " << shape.batch << " x " << shape.micro_batches << ", ctx " << shape.context << ", "
                << to_string(mode) << " " << to_string(precision));
  const ModelConfig config = model_config("tiny");
  const bool bf16 = precision == Precision::kBf16;
  std::vector<std::int32_t> tokens, targets;
  test::random_tokens(shape.step_tokens(), config.vocab, 9, tokens, targets);
  auto rt = emu_runtime(config, shape, mode, precision);
  const std::string prepared = rt->kernel_summary();  // the kernels compiled before the first step
  std::vector<float> params(static_cast<std::size_t>(rt->layout().total));
  init_parameters<float>(rt->layout(), params.data(), 4);
  rt->set_parameters(params);
  const auto before = *rt->launches();
  const auto got = test::accumulate_step(*rt, shape, tokens, targets);
  CHECK(rt->kernel_summary() == prepared);  // the adds' kernels among them: none compiled on demand
  const auto want = test::whole_batch_step(config, shape, params, tokens, targets);
  CHECK(got.loss == Approx(want.loss).epsilon(bf16 ? kBf16LossTolerance : 1e-5));
  for (const auto& t : rt->layout().tensors) {
    INFO(t.name);
    CHECK(test::rel_l2(got.grads, want.grads, t.offset, t.numel) <= (bf16 ? kBf16GradientTolerance : 1e-5));
  }
  // Each backward after the first adds the embedding's, the final norm's and
  // every block's two norms' gradients, one primitive add each.
  const auto launched = rt->launches()->since(before);
  const std::int64_t adds = (shape.micro_batches - 1) * (2 * config.layers + 2);
  const auto it = launched.by_family.find("prim_add");
  CHECK((it == launched.by_family.end() ? 0 : it->second) >= adds);
  if (mode == Mode::kCompiled) CHECK(it->second == adds);  // eager chains launch adds of their own
}

}  // namespace

TEST_CASE("emu backend, compiled f32: K micro-batches' gradients are the cpu's of one batch of their windows",
          "[emu][model][accumulate]") {
  check_matches_whole_batch(RunShape{2, 16, 2}, Mode::kCompiled, Precision::kF32);
  check_matches_whole_batch(RunShape{1, 13, 3}, Mode::kCompiled, Precision::kF32);
}

TEST_CASE("emu backend, compiled bf16: K micro-batches' gradients are the cpu's of one batch within bf16's tolerance",
          "[emu][model][accumulate]") {
  check_matches_whole_batch(RunShape{1, 13, 3}, Mode::kCompiled, Precision::kBf16);
}

TEST_CASE("emu backend, eager mode: K micro-batches' gradients are the cpu's of one batch of their windows",
          "[emu][model][accumulate]") {
  check_matches_whole_batch(RunShape{1, 12, 2}, Mode::kEager, Precision::kF32);
  check_matches_whole_batch(RunShape{1, 12, 2}, Mode::kEager, Precision::kBf16);
}

TEST_CASE("emu backend, compiled with graphs: steps of micro-batches replay both backward passes to the bit",
          "[emu][model][accumulate][graphs]") {
  const ModelConfig config = model_config("tiny");
  const RunShape shape{1, 16, 2};
  auto plain = emu_runtime(config, shape, Mode::kCompiled, Precision::kBf16);
  auto graphed = emu_runtime(config, shape, Mode::kCompiled, Precision::kBf16, true);
  std::vector<float> params(static_cast<std::size_t>(plain->layout().total));
  init_parameters<float>(plain->layout(), params.data(), 2);
  plain->set_parameters(params);
  graphed->set_parameters(params);
  templates::adamw::AdamwHyper hyper;
  hyper.lr = 1e-2f;
  hyper.max_grad_norm = 1.0f;
  for (std::uint64_t step = 0; step < 3; ++step) {  // each pass captured on its second run, replayed on its third
    INFO("step " << step + 1);
    std::vector<std::int32_t> tokens, targets;
    test::random_tokens(shape.step_tokens(), config.vocab, 20 + step, tokens, targets);
    const auto a = test::accumulate_step(*plain, shape, tokens, targets);
    const auto b = test::accumulate_step(*graphed, shape, tokens, targets);
    CHECK(b.loss == a.loss);
    CHECK(test::differing(b.grads, a.grads) == 0);
    plain->step(hyper);
    graphed->step(hyper);
  }
  CHECK(test::differing(graphed->parameters(), plain->parameters()) == 0);
  CHECK(graphed->kernel_summary().find("graphs of") != std::string::npos);
}

}  // namespace model_accumulate_emu_test
