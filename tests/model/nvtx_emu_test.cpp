// --nvtx on the emulated device backend, compiled mode with graphs: the
// walked passes' ranges as on the cpu backend, and a replayed pass one range
// named for its phase.
#include <catch2/catch.hpp>

#include "model/device_check.hpp"
#include "model/nvtx_check.hpp"
#include "model/runtime.hpp"

namespace model_nvtx_emu_test {

using namespace ktune;
using namespace ktune::model;

TEST_CASE("NVTX ranges (--nvtx) on emu with graphs: walked passes in ranges by phase, block and op, replays in one "
          "range each",
          "[model][emu]") {
  const ModelConfig config = model_config("tiny");
  const RunShape shape{2, 8};
  std::vector<std::int32_t> tokens, targets;
  test::random_tokens(shape.tokens(), config.vocab, 3, tokens, targets);
  BackendOptions b;
  b.backend = "emu";
  b.graphs = true;
  b.nvtx = true;
  test::NvtxRecorder ranges;
  auto rt = make_runtime(config, shape, Allocation::kTrain, b);
  // Walked, then captured and replayed, then replayed.
  for (int step = 0; step < 3; ++step) {
    rt->forward(tokens, targets);
    rt->backward();
    rt->step(templates::adamw::AdamwHyper{});
  }
  rt->synchronize();
  CHECK(ranges.balanced());
  CHECK(ranges.count_at("forward (graph)", 0) == 2);
  CHECK(ranges.count_at("backward (graph)", 0) == 2);
  CHECK(ranges.count_at("optimizer", 0) == 3);
  // The first step's walk: each block in its phase, its ops inside.
  CHECK(ranges.count_at("block 1 forward", 1) >= 1);
  CHECK(ranges.count_at("block 0 backward", 1) >= 1);
  CHECK(ranges.count_at("rmsnorm_forward", 1) == 1);  // the one norm before the blocks
  CHECK(ranges.count_at("gemm ", 2) > 0);
}

}  // namespace model_nvtx_emu_test
