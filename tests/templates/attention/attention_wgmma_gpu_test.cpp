// GPU twin of the wgmma cases of family_emu_test.cpp and backward_emu_test.cpp:
// the forward (mma 1, and 2 overlapped; each with pingpong) and the
// dK/dV pass (mma 1, and 2 overlapped; dQ by atomics and by bulk reductions;
// tile orders 0 and 1; pingpong) on Hopper's warpgroup products,
// compiled for sm_90a, against the streaming fp64 reference, on the shapes
// the emulation runs and on the CS336 leaderboard's problem (checked on a
// seeded sample of rows). Skipped without a device, and on a device other
// than sm_90.
#include <catch2/catch.hpp>

#include "support.hpp"
#include "templates/attention/attention.hpp"
#include "templates/attention/backward_check.hpp"
#include "templates/attention/shapes.hpp"
#include "tuner/precompile.hpp"
#include "tuner/run/gpu_runner.hpp"

namespace templates_attention_attention_wgmma_gpu_test {

using namespace ktune;
using namespace ktune::templates;
using namespace ktune::templates::attention;
using test::attention::problem;
using test::attention::wgmma_forward;
using test::attention::wgmma_backward;

TEST_CASE("attention on wgmma on the GPU: forward and backward against the reference", "[attention][gpu]") {
  test::skip_without_gpu();
  auto runner = tuner::make_gpu_runner();
  test::skip_unless_arch(runner->device().arch, "sm_90", "wgmma");
  Problem grouped = problem("bf16", 150, 128, true, 2, 4);
  grouped.dims["kv_heads"] = 2;
  Problem mqa = problem("f16", 130, 128, true, 1, 3);
  mqa.dims["kv_heads"] = 1;
  const Problem leaderboard = problem("bf16", 16384, 64, true, 1, 16);
  const Problem d128 = problem("bf16", 16384, 128, true, 1, 16);
  std::vector<test::Variant> variants = {
      {&forward_family(), wgmma_forward(128, 128, 2), problem("bf16", 257, 64, true)},
      {&forward_family(), wgmma_forward(128, 64, 2), problem("f16", 200, 128, true)},
      {&forward_family(), wgmma_forward(64, 128, 1), problem("bf16", 77, 128, false)},
      {&forward_family(), wgmma_forward(64, 16, 3), problem("f16", 100, 64, true, 1, 1)},
      {&forward_family(), wgmma_forward(128, 32, 2), grouped},
      {&forward_family(), wgmma_forward(128, 128, 2), leaderboard},
      {&forward_family(), wgmma_forward(128, 128, 2), d128},
      // overlapped (mma 2)
      {&forward_family(), wgmma_forward(128, 128, 2, 2), problem("bf16", 257, 64, true)},
      {&forward_family(), wgmma_forward(128, 64, 2, 2), problem("f16", 200, 128, true)},
      {&forward_family(), wgmma_forward(64, 16, 3, 2), problem("f16", 100, 64, true, 1, 1)},
      {&forward_family(), wgmma_forward(128, 32, 3, 2), grouped},
      {&forward_family(), wgmma_forward(128, 128, 2, 2), leaderboard},
      {&forward_family(), wgmma_forward(128, 128, 2, 2), d128},
      // the warpgroups taking turns (pingpong), in turn and overlapped
      {&forward_family(), wgmma_forward(128, 128, 2, 1, 1), problem("bf16", 257, 64, true)},
      {&forward_family(), wgmma_forward(128, 64, 2, 2, 1), problem("f16", 200, 128, true)},
      {&forward_family(), wgmma_forward(128, 32, 1, 1, 1), grouped},
      {&forward_family(), wgmma_forward(128, 64, 2, 1, 1), leaderboard},
      {&forward_family(), wgmma_forward(128, 128, 2, 2, 1), d128},
      {&backward_family(), wgmma_backward(64, 128, 2), problem("bf16", 257, 64, true)},
      {&backward_family(), wgmma_backward(128, 64, 1), problem("f16", 100, 64, false, 2, 2)},
      {&backward_family(), wgmma_backward(128, 128, 4), problem("bf16", 70, 64, true)},
      {&backward_family(), wgmma_backward(64, 64, 2), problem("bf16", 150, 128, true)},
      {&backward_family(), wgmma_backward(64, 128, 1), mqa},
      {&backward_family(), wgmma_backward(64, 128, 2), leaderboard},
      // overlapped (mma 2)
      {&backward_family(), wgmma_backward(128, 128, 2, 2), problem("bf16", 257, 64, true)},
      {&backward_family(), wgmma_backward(64, 128, 4, 2), problem("f16", 100, 128, false, 2, 2)},
      // the warpgroups taking turns (pingpong), in turn and overlapped
      {&backward_family(), wgmma_backward(128, 128, 2, 1, 1, 0, 1), problem("bf16", 257, 64, true)},
      {&backward_family(), wgmma_backward(64, 128, 4, 2, 1, 0, 1), problem("f16", 100, 128, false, 2, 2)},
      {&backward_family(), wgmma_backward(128, 128, 2, 1, 1, 1, 1), leaderboard},
      {&backward_family(), wgmma_backward(128, 128, 2, 2, 1, 1, 1), leaderboard},
      {&backward_family(), wgmma_backward(64, 64, 1, 2), problem("bf16", 70, 64, true)},
      {&backward_family(), wgmma_backward(64, 128, 2, 2), mqa},
      {&backward_family(), wgmma_backward(128, 128, 2, 2), leaderboard},
      // dQ by bulk reductions; the longest blocks of every head first
      {&backward_family(), wgmma_backward(128, 128, 2, 2, 2), problem("bf16", 257, 64, true)},
      {&backward_family(), wgmma_backward(64, 128, 2, 1, 2), problem("f16", 100, 128, false, 2, 2)},
      {&backward_family(), wgmma_backward(128, 64, 1, 1, 2), problem("bf16", 155, 64, true)},
      {&backward_family(), wgmma_backward(64, 128, 2, 2, 2, 1), mqa},
      {&backward_family(), wgmma_backward(128, 128, 2, 2, 2, 1), leaderboard},
      {&backward_family(), wgmma_backward(128, 128, 2, 1, 1, 1), leaderboard},
  };
  test::precompile(variants, runner->device().arch);
  auto backend = tuner::exec::make_cuda_backend();
  for (const auto& v : variants) {
    INFO(v.family->name() << " " << v.problem.key() << " " << v.config.str());
    if (v.family == &backward_family()) {
      test::check_backward(*backend, v.config, v.problem);
      continue;
    }
    tuner::RunOptions options;
    options.seed = 7;
    const auto r = runner->run(*v.family, v.config, v.problem, options);
    INFO(r.failure);
    CHECK(r.ok);
  }
}

}  // namespace templates_attention_attention_wgmma_gpu_test
