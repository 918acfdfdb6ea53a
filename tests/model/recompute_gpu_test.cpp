// Activation recomputation on a GPU, the twin of recompute_emu_test.cpp at
// the small model's size: compiled bf16 with and without CUDA graphs (the
// walk is the backends' and modes' one), a recomputing run's losses and
// gradients are a keeping run's within the spread of two runtimes' GEMM
// algorithms. The emulation's twin checks the first loss to the bit; here
// each runtime asks cuBLASLt's heuristic (--deterministic: untimed, where
// timing would pick by noise), whose choice may follow the operands'
// alignments, which the two layouts need not share. Skipped without a device.
#include <catch2/catch.hpp>

#include "model/recompute_check.hpp"
#include "model/runtime.hpp"
#include "tuner/exec/backend.hpp"
#include "support.hpp"

namespace model_recompute_gpu_test {

using namespace ktune;
using namespace ktune::model;

namespace {

void check_close_steps(const RunShape& shape, Mode mode, Precision precision, bool graphs, int steps) {
  INFO(to_string(mode) << " " << to_string(precision) << (graphs ? ", graphs" : ""));
  const ModelConfig config = model_config("small");
  BackendOptions b;
  b.backend = "cuda";
  b.mode = mode;
  b.precision = precision;
  b.graphs = graphs;
  b.deterministic = true;
  const auto [kept, recomputed] = test::recompute_pair(config, shape, b, steps, 41, Recompute::kBlocks);
  const auto layout = parameter_layout(config);
  for (std::size_t s = 0; s < kept.losses.size(); ++s) {
    INFO("step " << s + 1);
    CHECK(recomputed.losses[s] == Approx(kept.losses[s]).epsilon(1e-4));
    for (const auto& t : layout.tensors) {
      INFO(t.name);
      CHECK(test::rel_l2(recomputed.gradients[s], kept.gradients[s], t.offset, t.numel) <= 1e-2);
    }
  }
}

}  // namespace

TEST_CASE("cuda backend, recompute: the small model's steps are a keeping run's", "[gpu][model][recompute]") {
  test::skip_without_gpu();
  check_close_steps(RunShape{2, 100}, Mode::kCompiled, Precision::kBf16, false, 2);
  // Each backward graph captured on its second run, replayed on its third.
  check_close_steps(RunShape{2, 128, 2}, Mode::kCompiled, Precision::kBf16, true, 3);
}

TEST_CASE("cuda backend, recompute auto: the GPU's free memory, and the level a run fits at there",
          "[gpu][model][recompute]") {
  test::skip_without_gpu();
  BackendOptions b;
  b.backend = "cuda";
  b.precision = Precision::kBf16;
  const std::int64_t free = available_memory(b);
  const auto total = static_cast<std::int64_t>(tuner::exec::make_cuda_backend()->memory().total_bytes);
  CHECK(free > 0);
  CHECK(free <= total);
  const ModelConfig small = model_config("small");
  CHECK(least_recompute(small, RunShape{4, 256}, b, free) == Recompute::kNone);  // a few GiB
  // A context whose kept activations pass any GPU's memory: the least level is the last.
  CHECK(least_recompute(model_config("2.7B"), RunShape{64, 4096}, b, free) == Recompute::kBlocks);
}

}  // namespace model_recompute_gpu_test
