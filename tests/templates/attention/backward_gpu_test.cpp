// GPU twin of backward_emu_test.cpp: the attention backward through the CUDA
// backend against the streaming fp64 reference, for every problem class
// (default and a seeded sample), every head dim and dtype at ragged lengths,
// both dQ modes, grouped heads, the (batch, heads, seq, head_dim) layout,
// and a problem of benchmark size checked on its seeded sample of rows.
// Skipped without a device.
#include <catch2/catch.hpp>

#include <array>

#include "support.hpp"
#include "templates/attention/attention.hpp"
#include "templates/attention/backward_check.hpp"
#include "templates/attention/shapes.hpp"
#include "templates/sampled_configs.hpp"
#include "tuner/precompile.hpp"

namespace templates_attention_backward_gpu_test {

using namespace ktune;
using namespace ktune::templates;
using namespace ktune::templates::attention;
using test::attention::problem;

TEST_CASE("attention_bwd on the GPU: every problem class, default and a seeded sample of configs",
          "[attention][gpu]") {
  test::skip_without_gpu();
  auto backend = tuner::exec::make_cuda_backend();
  const auto& f = backward_family();
  std::vector<test::Variant> variants;
  for (const auto& p : f.problem_classes())
    for (auto& c : test::sampled_configs(f, p, backend->device(), 6)) variants.push_back({&f, std::move(c), p});
  test::precompile(variants, backend->device().arch);
  for (const auto& v : variants) test::check_backward(*backend, v.config, v.problem);
}

TEST_CASE("attention_bwd on the GPU: every head dim and dtype, sequences 1 to 257, both dQ modes, both layouts, "
          "swizzled and resident points",
          "[attention][gpu]") {
  test::skip_without_gpu();
  auto backend = tuner::exec::make_cuda_backend();
  std::vector<test::Variant> variants;
  for (const char* dtype : {"bf16", "f16", "f32"})
    for (const std::int64_t d : {16, 32, 64, 80, 128})
      for (const std::int64_t seq : {1, 17, 100, 257})
        for (const bool causal : {false, true}) {
          const Problem p = problem(dtype, seq, d, causal);
          Config c = backward_family().default_config(p);
          for (const std::int64_t atomic : {0, 1}) {
            // Both dQ modes; on the two longer sequences swizzled rows and the
            // resident operand in registers, each where it fits.
            c.set("dq_atomic", atomic);
            c.set("smem_layout", 0);
            c.set("resident_regs", 0);
            for (const char* option : {"smem_layout", "resident_regs"}) {
              Config wider = c;
              wider.set(option, 1);
              if (seq >= 100 && backward_family().is_valid(wider, p, backend->device())) c = wider;
            }
            variants.push_back({&backward_family(), c, p});
          }
        }
  test::precompile(variants, backend->device().arch);
  for (const auto& v : variants) test::check_backward(*backend, v.config, v.problem, v.problem.dim("seq") == 100);
  Problem gqa = problem("bf16", 300, 64, true, 2, 8);
  gqa.dims["kv_heads"] = 2;
  test::check_backward(*backend, backward_family().default_config(gqa), gqa, true);
}

TEST_CASE("attention_bwd on the GPU: warps sharing a group of keys, P^T and dS^T staged in shared memory",
          "[attention][gpu]") {
  test::skip_without_gpu();
  auto backend = tuner::exec::make_cuda_backend();
  const auto& f = backward_family();
  std::vector<test::Variant> variants;
  // FlashAttention-2's partition of 128 keys (4 groups of 2 warps) at 64- and 128-query tiles, both dQ modes,
  // and 4 warps to a group at head_dim 128.
  for (const char* dtype : {"bf16", "f32"})
    for (const std::int64_t seq : {100, 257})
      for (const std::int64_t atomic : {0, 1})
        for (const auto& [d, bm, bn, split] : {std::array<std::int64_t, 4>{64, 64, 128, 2},
                                               std::array<std::int64_t, 4>{64, 128, 128, 2},
                                               std::array<std::int64_t, 4>{128, 64, 64, 4}}) {
          const Problem p = problem(dtype, seq, d, seq == 257);
          Config c = f.default_config(p);
          c.set("block_m", bm);
          c.set("block_n", bn);
          c.set("warps", 8);
          c.set("warp_split", split);
          c.set("dq_atomic", atomic);
          if (f.is_valid(c, p, backend->device())) variants.push_back({&f, c, p});
        }
  REQUIRE(variants.size() >= 8);
  test::precompile(variants, backend->device().arch);
  for (const auto& v : variants) test::check_backward(*backend, v.config, v.problem);
}

TEST_CASE("attention_bwd on the GPU: the CS336 leaderboard's problem, checked on a sample of rows",
          "[attention][gpu]") {
  test::skip_without_gpu();
  auto backend = tuner::exec::make_cuda_backend();
  const Problem p = problem("bf16", 16384, 64, true, 1, 16);
  test::check_backward(*backend, backward_family().default_config(p), p);
}

}  // namespace templates_attention_backward_gpu_test
