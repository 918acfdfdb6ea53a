// --nvtx on the cpu backend: a training step's phases, each block's part of
// them and each op are NVTX ranges, nested as the walk runs them and closed
// in turn; without it, none.
#include <catch2/catch.hpp>

#include "model/device_check.hpp"
#include "model/nvtx_check.hpp"
#include "model/runtime.hpp"

namespace model_nvtx_test {

using namespace ktune;
using namespace ktune::model;

TEST_CASE("NVTX ranges (--nvtx): a step's phases, blocks and ops are ranges, nested and closed in turn, and none "
          "without it",
          "[model]") {
  const ModelConfig config = model_config("tiny");
  const RunShape shape{2, 8};
  std::vector<std::int32_t> tokens, targets;
  test::random_tokens(shape.tokens(), config.vocab, 3, tokens, targets);
  const auto train_step = [&](const BackendOptions& b) {
    auto rt = make_runtime(config, shape, Allocation::kTrain, b);
    rt->forward(tokens, targets);
    rt->backward();
    rt->step(templates::adamw::AdamwHyper{});
  };
  test::NvtxRecorder ranges;
  BackendOptions b;
  train_step(b);
  CHECK(ranges.opened.empty());

  b.nvtx = true;
  train_step(b);
  CHECK(ranges.balanced());
  CHECK(ranges.outermost() == std::vector<std::string>{"forward", "backward", "optimizer"});
  for (std::int64_t l = 0; l < config.layers; ++l) {
    CHECK(ranges.count_at(fmt::format("block {} forward", l), 1) == 1);
    CHECK(ranges.count_at(fmt::format("block {} backward", l), 1) == 1);
  }
  // The ops: the embedding and the head outside the blocks, the blocks' GEMMs inside them, AdamW in its phase.
  CHECK(ranges.count_at("embedding_forward 16x64", 1) == 1);
  CHECK(ranges.count_at("cross_entropy_forward", 1) == 1);
  CHECK(ranges.count_at("gemm ", 2) > 0);
  CHECK(ranges.count_at("attention_forward", 2) == static_cast<std::size_t>(config.layers));
  CHECK(ranges.count_at("adamw_step", 1) == 1);
}

}  // namespace model_nvtx_test
