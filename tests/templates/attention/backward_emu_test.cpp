// Attention backward kernels run by the host emulation backend against the
// streaming fp64 reference: every head dim and dtype at sequence lengths 1
// to 257 (ragged against every tile), causal and not; dQ by atomics and by
// the second pass; grouped- and multi-query heads; the (batch, heads, seq,
// head_dim) layout; and kernels broken on purpose (the diagonal tile's mask
// dropped, K read as V) that these checks must catch.
#include <catch2/catch.hpp>

#include "templates/attention/attention.hpp"
#include "templates/attention/backward_check.hpp"

using namespace ktune;
using namespace ktune::templates;
using namespace ktune::templates::attention;

namespace {

Problem problem(const char* dtype, std::int64_t seq, std::int64_t head_dim, bool causal, std::int64_t batch = 1,
                std::int64_t heads = 2) {
  return Problem{dtype,
                 {{"batch", batch}, {"heads", heads}, {"seq", seq}, {"head_dim", head_dim}, {"causal", causal}}};
}
Config config(std::int64_t block_m, std::int64_t block_n, std::int64_t warps, std::int64_t stages,
              std::int64_t dq_atomic) {
  return Config({{"block_m", block_m}, {"block_n", block_n}, {"warps", warps}, {"stages", stages},
                 {"dq_atomic", dq_atomic}});
}
std::unique_ptr<tuner::exec::Backend> emu() { return tuner::exec::make_emu_backend({2, "sm_80"}); }

}  // namespace

// The default and a seeded sample of configs of every problem class run in
// tests/tuner/emu/families_emu_test.cpp ("every family matches its CPU
// reference when emulated"), which covers every registered family.

TEST_CASE("attention_bwd: every head dim and dtype, sequences 1 to 257, causal and not", "[attention][emu]") {
  // Lengths: one row; 17 and 100 (a multiple of no tile); 257 (one past 256,
  // so every tile size has a one-row tail). Each head dim meets two dtypes
  // or masks, each dtype and mask several head dims; one source each (the
  // host compiler's time is most of this test's).
  auto backend = emu();
  struct Case {
    const char* dtype;
    std::int64_t head_dim;
    bool causal;
    std::int64_t seqs[2];
  };
  const Case cases[] = {{"bf16", 16, true, {1, 257}},  {"f32", 16, true, {100, 33}},   {"f16", 32, false, {17, 100}},
                        {"bf16", 64, true, {257, 70}}, {"f32", 64, true, {100, 257}},  {"bf16", 80, false, {1, 100}},
                        {"f16", 128, true, {17, 257}}, {"f32", 128, false, {1, 17}}};
  for (const auto& [dtype, d, causal, seqs] : cases)
    for (const std::int64_t seq : seqs) {
      const Problem p = problem(dtype, seq, d, causal, 1, seq < 100 ? 2 : 1);
      test::check_backward(*backend, backward_family().default_config(p), p);
    }
}

TEST_CASE("attention_bwd: dQ by the second pass and by atomics, tile shapes, stages and warps", "[attention][emu]") {
  auto backend = emu();
  struct Case {
    Config c;
    Problem p;
  };
  const Case cases[] = {
      // second pass; one stage; two m16 tiles per warp; block_m < block_n under a causal mask
      {config(16, 64, 2, 1, 0), problem("bf16", 77, 64, true)},
      // atomics with block_m > block_n, one warp, head_dim 80 (five n16 pairs)
      {config(32, 16, 1, 2, 1), problem("f16", 70, 80, true)},
      // tf32 by the second pass
      {config(32, 32, 2, 2, 0), problem("f32", 45, 64, true)},
  };
  for (const auto& [c, p] : cases) test::check_backward(*backend, c, p);
}

TEST_CASE("attention_bwd: grouped- and multi-query heads sum into their K/V head, in both layouts",
          "[attention][emu]") {
  auto backend = emu();
  for (const std::int64_t atomic : {0, 1}) {
    Problem p = problem("bf16", 45, 32, true, 2, 4);
    p.dims["kv_heads"] = 2;
    const Config c = config(32, 32, 2, 2, atomic);
    test::check_backward(*backend, c, p);
    test::check_backward(*backend, c, p, /*bhsd=*/true);
    p.dims["kv_heads"] = 1;
    test::check_backward(*backend, c, p, true);
  }
}

TEST_CASE("attention_bwd: a kernel broken on purpose fails these checks", "[attention][emu]") {
  auto backend = emu();
  const auto& f = backward_family();
  const Problem p = problem("bf16", 70, 32, true);
  const Config c = config(32, 32, 2, 2, 0);  // dQ by the second pass: both kernels' masks are in play
  const Rendered good = f.render(c, p);
  REQUIRE(test::run_backward(*backend, c, p, false, 3).worst() <= tolerance_for("bf16"));
  // The causal mask dropped on the diagonal tiles: keys after the query leak into every output.
  Rendered no_mask = good;
  for (const char* mask : {"(CAUSAL && query < key)", "(CAUSAL && key > row)"}) {
    const auto at = no_mask.source.rfind(mask);  // the last: the forward's kernel comes first in the text
    REQUIRE(at != std::string::npos);
    no_mask.source.replace(at, std::string(mask).size(), "false");
  }
  const auto masked = test::run_backward(*backend, c, p, false, 3, &no_mask);
  CHECK(masked.dq > masked.tolerance);
  CHECK(masked.dk > masked.tolerance);
  CHECK(masked.dv > masked.tolerance);
  // K's tile read where V's belongs in dP^T = V dO^T: dS, and so dK, go wrong; dV = P^T dO never reads V.
  Rendered swapped = good;
  const std::string va = "F::a(va[kt_], sv,";
  const auto at = swapped.source.find(va);
  REQUIRE(at != std::string::npos);
  swapped.source.replace(at, va.size(), "F::a(va[kt_], sk,");
  const auto wrong = test::run_backward(*backend, c, p, false, 3, &swapped);
  CHECK(wrong.dk > wrong.tolerance);
  CHECK(wrong.dv <= wrong.tolerance);
}
