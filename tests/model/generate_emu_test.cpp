// Generation on the emulated device backend: the logits a forward leaves are
// the cpu backend's (fp32 to 1e-5, bf16 within its rounding), and a greedy
// continuation draws the cpu's tokens.
#include <catch2/catch.hpp>

#include "model/device_check.hpp"
#include "model/parameters.hpp"
#include "model/runtime.hpp"
#include "model/train.hpp"

namespace model_generate_emu_test {

using namespace ktune;
using namespace ktune::model;

TEST_CASE("emu backend: a forward's logits and per-token losses are the cpu backend's, row by row",
          "[emu][model][generate]") {
  const ModelConfig config = model_config("tiny");
  const RunShape shape{2, 13};
  std::vector<std::int32_t> tokens, targets;
  test::random_tokens(shape.tokens(), config.vocab, 3, tokens, targets);
  BackendOptions cpu;
  auto want = make_runtime(config, shape, Allocation::kForwardOnly, cpu);
  want->forward(tokens, targets);
  for (const Precision precision : {Precision::kF32, Precision::kBf16}) {
    INFO(to_string(precision));
    BackendOptions emu;
    emu.backend = "emu";
    emu.precision = precision;
    auto got = make_runtime(config, shape, Allocation::kForwardOnly, emu);
    CHECK_THROWS_WITH(got->logits(0), Catch::Contains("no forward ran"));
    got->forward(tokens, targets);
    // bf16 logits: a bf16 GEMM's outputs from bf16 activations (device_model_emu_test.cpp's tolerances).
    const double tolerance = precision == Precision::kBf16 ? 5e-2 : 1e-5;
    for (const std::int64_t row : {std::int64_t{0}, std::int64_t{12}, shape.tokens() - 1}) {
      INFO("row " << row);
      const auto a = got->logits(row), b = want->logits(row);
      REQUIRE(a.size() == static_cast<std::size_t>(config.vocab));
      CHECK(test::rel_l2(a, b, 0, config.vocab) <= tolerance);
    }
    CHECK_THROWS_WITH(got->logits(shape.tokens()), Catch::Contains("token 26 of a batch of 26"));
    // The per-token losses whose mean the forward returned.
    CHECK(test::rel_l2(got->token_losses(), want->token_losses(), 0, shape.tokens()) <=
          (precision == Precision::kBf16 ? 2e-3 : 1e-5));
  }
}

TEST_CASE("emu backend: a greedy continuation draws the cpu backend's tokens", "[emu][model][generate]") {
  GenerateOptions g;
  g.model = model_config("tiny");
  g.shape = RunShape{1, 12};
  g.prompt = {5, 9, 2, 77};
  g.max_tokens = 16;  // past the context: the window slides
  g.temperature = 0;
  g.seed = 3;  // the initialisation's
  const auto cpu = generate(g);
  g.backend.backend = "emu";
  CHECK(generate(g) == cpu);
}

}  // namespace model_generate_emu_test
