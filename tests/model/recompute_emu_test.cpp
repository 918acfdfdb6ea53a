// Activation recomputation on the emulated device backend: compiled and
// eager mode, fp32 and bf16 mixed precision, with graphs and micro-batches,
// a run recomputing the SwiGLU or whole blocks takes a keeping run's
// losses, gradients and AdamW steps to the bit; its backward launches what
// it recomputes (the SwiGLU, or the forward of every block but the last)
// again, and compiles nothing the forward did not.
#include <catch2/catch.hpp>

#include "model/odd_model.hpp"
#include "model/recompute_check.hpp"

namespace model_recompute_emu_test {

using namespace ktune;
using namespace ktune::model;

namespace {

BackendOptions emu(Mode mode, Precision precision, bool graphs = false) {
  BackendOptions b;
  b.backend = "emu";
  b.mode = mode;
  b.precision = precision;
  b.graphs = graphs;
  return b;
}

void check_same_steps(const ModelConfig& config, const RunShape& shape, const BackendOptions& options, int steps) {
  for (const Recompute level : {Recompute::kSwiglu, Recompute::kBlocks}) {
    INFO("recompute " << to_string(level) << ", " << to_string(options.mode) << " " << to_string(options.precision)
                      << (options.graphs ? ", graphs" : "") << ", batch " << shape.batch << " x "
                      << shape.micro_batches << ", ctx " << shape.context);
    const auto [kept, recomputed] = test::recompute_pair(config, shape, options, steps, 21, level);
    for (std::size_t s = 0; s < kept.losses.size(); ++s) {
      INFO("step " << s + 1);
      CHECK(recomputed.losses[s] == kept.losses[s]);
      CHECK(test::differing(recomputed.gradients[s], kept.gradients[s]) == 0);
    }
    CHECK(test::differing(recomputed.parameters, kept.parameters) == 0);
  }
}

// The odd shape (head_dim 80, 3 heads) in three blocks: two recomputed.
ModelConfig odd_model() { return test::odd_model(3); }

}  // namespace

TEST_CASE("emu backend, recompute: compiled f32 and bf16 take a keeping run's steps, to the bit",
          "[emu][model][recompute]") {
  check_same_steps(model_config("tiny"), RunShape{2, 16}, emu(Mode::kCompiled, Precision::kF32), 2);
  check_same_steps(model_config("tiny"), RunShape{2, 16}, emu(Mode::kCompiled, Precision::kBf16), 2);
  check_same_steps(odd_model(), RunShape{1, 13}, emu(Mode::kCompiled, Precision::kBf16), 1);
}

TEST_CASE("emu backend, recompute: eager mode takes a keeping run's steps, to the bit", "[emu][model][recompute]") {
  check_same_steps(model_config("tiny"), RunShape{1, 12}, emu(Mode::kEager, Precision::kF32), 1);
  check_same_steps(model_config("tiny"), RunShape{1, 12}, emu(Mode::kEager, Precision::kBf16), 1);
}

TEST_CASE("emu backend, recompute: graphs over micro-batches take a keeping run's steps, to the bit",
          "[emu][model][recompute][graphs]") {
  // Three steps of two micro-batches: each backward graph captured on its second run, replayed from its third.
  check_same_steps(model_config("tiny"), RunShape{1, 16, 2}, emu(Mode::kCompiled, Precision::kBf16, true), 3);
}

TEST_CASE("emu backend, recompute: the backward runs again what the blocks but the last did not keep",
          "[emu][model][recompute]") {
  const ModelConfig config = odd_model();
  std::int64_t attention_backward[3] = {0, 0, 0};
  for (const Recompute level : {Recompute::kNone, Recompute::kSwiglu, Recompute::kBlocks}) {
    INFO("recompute " << to_string(level));
    RunShape shape{1, 13};
    shape.recompute = level;
    auto rt = make_runtime(config, shape, Allocation::kTrain, emu(Mode::kCompiled, Precision::kBf16));
    const std::string prepared = rt->kernel_summary();
    std::vector<std::int32_t> tokens, targets;
    test::random_tokens(shape.tokens(), config.vocab, 3, tokens, targets);
    const auto start = *rt->launches();
    rt->forward(tokens, targets);
    const auto forward = rt->launches()->since(start);
    const auto before = *rt->launches();
    rt->backward();
    const auto backward = rt->launches()->since(before);
    const auto count = [](const LaunchCount& c, const std::string& family) {
      const auto it = c.by_family.find(family);
      return it == c.by_family.end() ? std::int64_t{0} : it->second;
    };
    const std::int64_t again = level == Recompute::kNone ? 0 : config.layers - 1;
    CHECK(count(forward, "attention_fwd") == config.layers);
    CHECK(count(backward, "attention_fwd") == (level == Recompute::kBlocks ? again : 0));
    CHECK(count(backward, "swiglu_fwd") == again);
    attention_backward[static_cast<int>(level)] = count(backward, "attention_bwd");
    CHECK(rt->kernel_summary() == prepared);  // nothing compiled on demand
  }
  CHECK(attention_backward[0] >= config.layers);
  CHECK(attention_backward[1] == attention_backward[0]);
  CHECK(attention_backward[2] == attention_backward[0]);
}

}  // namespace model_recompute_emu_test
