// Generation on a GPU, the twin of generate_emu_test.cpp at the small
// model's size: a forward's logits and per-token losses are the cpu backend's, and a greedy
// continuation draws the cpu's tokens. Skipped without a device.
#include <catch2/catch.hpp>

#include "model/device_check.hpp"
#include "model/runtime.hpp"
#include "model/train.hpp"
#include "support.hpp"

namespace model_generate_gpu_test {

using namespace ktune;
using namespace ktune::model;

TEST_CASE("cuda backend: the small model's logits, per-token losses and greedy continuation are the cpu backend's",
          "[gpu][model][generate]") {
  test::skip_without_gpu();
  const ModelConfig config = model_config("small");
  const RunShape shape{1, 100};
  std::vector<std::int32_t> tokens, targets;
  test::random_tokens(shape.tokens(), config.vocab, 7, tokens, targets);
  BackendOptions cpu, cuda;
  cpu.threads = 8;
  cuda.backend = "cuda";
  auto want = make_runtime(config, shape, Allocation::kForwardOnly, cpu);
  auto got = make_runtime(config, shape, Allocation::kForwardOnly, cuda);
  want->forward(tokens, targets);
  got->forward(tokens, targets);
  for (const std::int64_t row : {std::int64_t{0}, shape.tokens() - 1})
    CHECK(test::rel_l2(got->logits(row), want->logits(row), 0, config.vocab) <= 1e-4);
  CHECK(test::rel_l2(got->token_losses(), want->token_losses(), 0, shape.tokens()) <= 1e-4);

  GenerateOptions g;
  g.model = config;
  g.shape = RunShape{1, 64};
  g.threads = 8;
  g.prompt.assign(tokens.begin(), tokens.begin() + 10);
  g.max_tokens = 8;
  g.temperature = 0;
  const auto on_cpu = generate(g);
  g.backend.backend = "cuda";
  CHECK(generate(g) == on_cpu);
}

}  // namespace model_generate_gpu_test
