// Attention backward kernels run by the host emulation backend against the
// streaming fp64 reference: every head dim and dtype at sequence lengths 1
// to 257 (ragged against every tile), causal and not; dQ by atomics and by
// the second pass; swizzled and padded tiles, resident operands in
// registers or re-read from shared memory (a seeded sample); warps sharing
// keys, with P^T and dS^T staged in shared memory; grouped- and
// multi-query heads; the (batch, heads, seq, head_dim) layout; the
// family's own check at seq 1 (dQ and dK exactly 0) and at scales past the
// default; the wgmma
// dK/dV pass in turn and overlapped (mma 1, 2), dQ by each thread's atomics
// and by bulk reductions (dq_atomic 1, 2), over their shapes; and
// kernels broken on purpose (the
// diagonal tile's mask dropped, K read as V, tiles written unswizzled but
// read swizzled, the wgmma pass's dS^T staged at the wrong keys) that these
// checks must catch.
#include <catch2/catch.hpp>

#include <random>

#include "templates/attention/attention.hpp"
#include "templates/attention/backward_check.hpp"
#include "templates/attention/shapes.hpp"
#include "templates/attention/workload_common.hpp"
#include "templates/render.hpp"
#include "tuner/run/emu_runner.hpp"

namespace templates_attention_backward_emu_test {

using namespace ktune;
using namespace ktune::templates;
using namespace ktune::templates::attention;
using test::attention::problem;
using test::attention::wgmma_backward;

namespace {

Config config(std::int64_t block_m, std::int64_t block_n, std::int64_t warps, std::int64_t stages,
              std::int64_t dq_atomic, std::int64_t smem_layout = 0, std::int64_t resident_regs = 0,
              std::int64_t warp_split = 1) {
  return Config({{"block_m", block_m}, {"block_n", block_n}, {"warps", warps}, {"warp_split", warp_split},
                 {"stages", stages}, {"smem_layout", smem_layout}, {"resident_regs", resident_regs},
                 {"dq_atomic", dq_atomic}, {"mma", 0}, {"tile_order", 0}, {"pingpong", 0}});
}
std::unique_ptr<tuner::exec::Backend> emu() { return tuner::exec::make_emu_backend({2, "sm_80"}); }
/// The wgmma cases' multi-query heads: 3 query heads of head_dim 128 summed into one K/V head, 130 keys, causal.
Problem multi_query() {
  Problem p = problem("f16", 130, 128, true, 1, 3);
  p.dims["kv_heads"] = 1;
  return p;
}

/// run_backward on `c`'s kernels with `from` replaced by `to` in the wgmma dK/dV pass's source (`anywhere`:
/// its first place in the source, for the helpers of attention_common.cuh).
test::BackwardErrors run_wgmma_broken(tuner::exec::Backend& backend, const Config& c, const Problem& p,
                                      const std::string& from, const std::string& to, bool anywhere = false) {
  Rendered r = backward_family().render(c, p);
  const std::size_t at = r.source.find(from, anywhere ? 0 : r.source.find("attention_bwd_dkdv_wgmma("));
  REQUIRE(at != std::string::npos);
  r.source.replace(at, from.size(), to);
  return test::run_backward(backend, c, p, false, 3, &r);
}

/// The family's workload of `p` (batch 1, one head), but every element of Q
/// is `q_value` and K's are drawn in [1, 2): at a q_value far below 0 every
/// score of a row is (about -24 at -2 and head_dim 64), and so is its
/// log-sum-exp, so that exp(-lse), what P would be at a key past the
/// sequence (a zero row of K), overflows the dtype. O, lse and the
/// expected dQ, dK, dV are the fp64 reference's of these inputs.
Workload anti_aligned(const Problem& p, double q_value) {
  Workload w = backward_family().make_workload(p, 3);
  const AttentionShape s = shape_of(p);
  REQUIRE(s.batch * s.heads * s.kv_heads == 1);
  const auto n = static_cast<std::size_t>(s.seq * s.head_dim);
  const auto values = [&](const HostBuffer& b) {
    std::vector<double> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = value_at(b.dtype, b.bytes, i);
    return x;
  };
  std::mt19937_64 rng(5);
  const std::vector<double> q(n, stored(p, q_value)), k = draw_stored(p, rng, n, 1.f, 2.f);
  const std::vector<double> v = values(w.buffers[2]), dout = values(w.buffers[5]);
  const double scale = default_scale(s.head_dim);
  const TensorStrides st = bshd_strides(s);
  std::vector<double> o(n), lse(static_cast<std::size_t>(s.seq)), dq(n), dk(n), dv(n);
  attention_forward_streaming<double>(q.data(), k.data(), v.data(), o.data(), lse.data(), s, st, st, st, st, scale, 0,
                                      1);
  for (auto& x : o) x = stored(p, x);
  for (auto& x : lse) x = static_cast<float>(x);
  attention_backward_streaming<double>(q.data(), k.data(), v.data(), o.data(), lse.data(), dout.data(), dq.data(),
                                       dk.data(), dv.data(), s, st, st, scale, 0, 1);
  w.buffers[0].bytes = element_buffer("q", Role::kInput, p, q).bytes;
  w.buffers[1].bytes = element_buffer("k", Role::kInput, p, k).bytes;
  w.buffers[3].bytes = element_buffer("o", Role::kInput, p, o).bytes;
  const std::vector<float> lse32(lse.begin(), lse.end());
  w.buffers[4].bytes = make_buffer("lse", Role::kInput, DType::kF32, lse32).bytes;
  for (auto [i, values] : {std::pair{6, &dq}, std::pair{7, &dk}, std::pair{8, &dv}})
    w.buffers[static_cast<std::size_t>(i)].expected = element_buffer("x", Role::kOutput, p, *values).bytes;
  return w;
}

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
      // K and V in registers, dS^T in V's tile (block_m 32 <= head_dim 64), swizzled
      {config(32, 64, 4, 2, 1, 1, 1), problem("bf16", 100, 64, true)},
      // K and V in registers, dS^T in a tile of its own (block_m 64 > head_dim 32); tf32
      {config(64, 32, 2, 2, 1, 0, 1), problem("f32", 70, 32, false)},
      // the default of long 16-bit sequences up to head_dim 64: 128 keys over 4 warps (two m16 tiles each),
      // 16-query tiles, atomics; ragged and causal, and more keys than one block
      {config(16, 128, 4, 2, 1), problem("bf16", 150, 64, true)},
      {config(16, 128, 4, 2, 1), problem("f16", 300, 32, false)},
      // four stages in flight: more steps than stages, and (seq 40, causal) fewer
      {config(16, 128, 4, 4, 1), problem("bf16", 150, 64, true)},
      {config(16, 64, 4, 4, 0, 1), problem("f16", 200, 64, false)},
      {config(32, 32, 2, 4, 0), problem("bf16", 40, 32, true)},
  };
  for (const auto& [c, p] : cases) test::check_backward(*backend, c, p);
}

TEST_CASE("attention_bwd: warps sharing a group of keys, P^T and dS^T staged in shared memory", "[attention][emu]") {
  // warp_split 2 and 4: the group's warps split the query tile's columns of
  // S^T and the head dim's of dK, dV. Both dQ modes, both layouts, K and V
  // in registers, tf32, one and two m16 tiles of keys per group, grouped
  // query heads summing into their K/V head, dQ pieces of one, two and four
  // n16 pairs; ragged and causal.
  auto backend = emu();
  struct Case {
    Config c;
    Problem p;
  };
  Problem gqa = problem("f16", 45, 64, true, 1, 4);
  gqa.dims["kv_heads"] = 2;
  const Case cases[] = {
      // FlashAttention-2's partition at head_dim 64: 128 keys over 4 groups of 2 warps, 64-query tiles
      {config(64, 128, 8, 2, 1, 0, 0, 2), problem("bf16", 150, 64, true)},
      // the same by the second pass, swizzled, K and V in registers
      {config(32, 128, 8, 2, 0, 1, 1, 2), problem("bf16", 257, 64, false)},
      // four warps to one m16 tile of keys, head_dim 128 in four 32-column shares; one stage
      {config(64, 32, 8, 1, 1, 0, 0, 4), problem("f16", 100, 128, true)},
      // two tiles of keys per group, tf32, dS^T in its own tile although K and V stay in registers
      {config(32, 64, 4, 2, 1, 0, 1, 2), problem("f32", 70, 32, true)},
      {config(32, 64, 4, 2, 1, 1, 0, 2), gqa},
      // dQ by atomics in pieces of the whole head dim (four n16 pairs) per warp, swizzled
      {config(64, 64, 4, 2, 1, 1, 0, 2), problem("bf16", 130, 64, true)},
  };
  for (const auto& [c, p] : cases) test::check_backward(*backend, c, p);
}

TEST_CASE("attention_bwd: swizzled tiles and resident operands in registers, a seeded sample per dtype",
          "[attention][emu]") {
  // Per dtype and each pairing of the two tunables other than the default's
  // (swizzled; resident in registers; both), one valid config drawn from the
  // rest of the space, seeded, on a ragged problem of a head dim whose rows
  // are whole 128-byte swizzles (64) or not (80, 32 for f32: 10 and 8 chunks).
  auto backend = emu();
  const auto& f = backward_family();
  std::mt19937_64 rng(11);
  struct Case {
    const char* dtype;
    std::int64_t seq, head_dim;
    bool causal;
  };
  const Case cases[] = {{"bf16", 77, 64, true}, {"f16", 45, 80, false}, {"f32", 70, 32, true}};
  for (const auto& [dtype, seq, d, causal] : cases)
    for (const auto& [layout, resident] : {std::pair{1, 0}, std::pair{0, 1}, std::pair{1, 1}}) {
      const Problem p = problem(dtype, seq, d, causal);
      for (int attempt = 0;; ++attempt) {
        REQUIRE(attempt < 1000);
        Config c = f.space().at(rng() % f.space().size());
        c.set("smem_layout", layout);
        c.set("resident_regs", resident);
        if (!f.is_valid(c, p, backend->device())) continue;
        test::check_backward(*backend, c, p);
        break;
      }
    }
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

TEST_CASE("attention_bwd: the longest blocks of every head first (tile_order 1), both passes and wgmma, over "
          "batches and grouped heads",
          "[attention][emu]") {
  auto backend = emu();
  const auto order = [](Config c) {
    c.set("tile_order", 1);
    return c;
  };
  Problem gqa = problem("f16", 45, 64, true, 2, 4);
  gqa.dims["kv_heads"] = 2;
  // dQ by atomics over batch 2 x 3 heads; by the second pass (whose query blocks are ordered too); grouped heads
  test::check_backward(*backend, order(config(64, 64, 4, 2, 1)), problem("bf16", 200, 64, true, 2, 3));
  test::check_backward(*backend, order(config(32, 64, 4, 2, 0)), problem("f16", 130, 32, true, 2, 2), true);
  test::check_backward(*backend, order(config(32, 64, 4, 2, 1, 1, 0, 2)), gqa);
  auto hopper = tuner::exec::make_emu_backend({2, "sm_90"});
  test::check_backward(*hopper, wgmma_backward(64, 128, 2, 2, 2, 1), problem("bf16", 257, 64, true, 2, 2));
  // Broken on purpose: the key block taken from the grid's x while the head and batch follow the order, so
  // some blocks of keys are done twice and others never.
  const Config c = order(config(64, 64, 4, 2, 1));
  const Problem p = problem("bf16", 200, 64, true, 2, 3);
  Rendered r = backward_family().render(c, p);
  const std::string rank = "const int n0 = tile.rank * BLOCK_N;";
  const auto at = r.source.find(rank);
  REQUIRE(at != std::string::npos);
  r.source.replace(at, rank.size(), "const int n0 = static_cast<int>(blockIdx.x) * BLOCK_N;");
  const auto wrong = test::run_backward(*backend, c, p, false, 3, &r);
  CHECK(wrong.dk > wrong.tolerance);
  CHECK(wrong.dv > wrong.tolerance);
}

TEST_CASE("attention_bwd: rows whose scores are all far below 0 get a finite dQ where the last key block runs past "
          "the sequence, by atomics and by the second pass, on mma.sync and on wgmma",
          "[attention][emu]") {
  // Not causal: the last key block's keys past the sequence are seen by every query tile, and their P is
  // exp(-lse), inf in 16 bits where lse < -11 (f16) or -88 (bf16); masked, they add nothing to dQ.
  auto sm80 = emu();
  auto sm90 = tuner::exec::make_emu_backend({2, "sm_90"});
  struct Case {
    tuner::exec::Backend* backend;
    Config c;
    Problem p;
    double q_value;
  };
  const Problem f16 = problem("f16", 37, 64, false, 1, 1), bf16 = problem("bf16", 100, 64, false, 1, 1);
  const Case cases[] = {
      {sm80.get(), backward_family().default_config(f16), f16, -2.0},
      {sm80.get(), backward_family().default_config(bf16), bf16, -8.0},
      {sm80.get(), config(32, 64, 4, 2, 1), f16, -1.5},
      {sm80.get(), config(32, 64, 4, 2, 0), f16, -2.0},  // the second pass, which masked them already
      {sm90.get(), wgmma_backward(64, 128, 2), f16, -2.0},
      {sm90.get(), wgmma_backward(128, 128, 2, 2, 2), bf16, -8.0},
  };
  CHECK_FALSE(backward_family().deterministic(cases[0].c));  // the defaults sum dQ by atomics
  CHECK_FALSE(backward_family().deterministic(cases[1].c));
  for (const auto& [backend, c, p, q_value] : cases) {
    INFO("q = " << q_value);
    const Workload w = anti_aligned(p, q_value);
    const test::BackwardErrors e = test::run_backward(*backend, c, p, false, 3, nullptr, &w);
    INFO("dq " << e.dq << " dk " << e.dk << " dv " << e.dv << " tolerance " << e.tolerance);
    CHECK(e.dq <= e.tolerance);
    CHECK(e.dk <= e.tolerance);
    CHECK(e.dv <= e.tolerance);
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
    const auto at = no_mask.source.find(mask);  // each mask is written once: dK/dV pass, dQ pass
    REQUIRE(at != std::string::npos);
    no_mask.source.replace(at, std::string(mask).size(), "false");
  }
  const auto masked = test::run_backward(*backend, c, p, false, 3, &no_mask);
  CHECK(masked.dq > masked.tolerance);
  CHECK(masked.dk > masked.tolerance);
  CHECK(masked.dv > masked.tolerance);
  CHECK_FALSE(masked.family_check);  // its atols do not pass it either
  // K's tile read where V's belongs in dP^T = V dO^T: dS, and so dK, go wrong; dV = P^T dO never reads V.
  Rendered swapped = good;
  const std::string va = "F::a(va[kt_], sv,";
  const auto at = swapped.source.find(va);
  REQUIRE(at != std::string::npos);
  swapped.source.replace(at, va.size(), "F::a(va[kt_], sk,");
  const auto wrong = test::run_backward(*backend, c, p, false, 3, &swapped);
  CHECK(wrong.dk > wrong.tolerance);
  CHECK(wrong.dv <= wrong.tolerance);
  CHECK_FALSE(wrong.family_check);
  // Warps sharing keys (warp_split 2) each staging their P^T columns at the
  // tile's first column instead of their own: dV = P^T dO goes wrong, dK
  // (from dS^T, staged right) does not.
  const Config split = config(32, 64, 4, 2, 1, 0, 0, 2);
  Rendered overlapped = f.render(split, p);
  const std::string stage_p = "stage_tile<DsLayout>(sp, warp_key0 + kt_ * 16, warp_query0, s[kt_]);";
  const auto at_p = overlapped.source.find(stage_p);
  REQUIRE(at_p != std::string::npos);
  overlapped.source.replace(at_p, stage_p.size(), "stage_tile<DsLayout>(sp, warp_key0 + kt_ * 16, 0, s[kt_]);");
  REQUIRE(test::run_backward(*backend, split, p, false, 3).worst() <= tolerance_for("bf16"));
  const auto staged = test::run_backward(*backend, split, p, false, 3, &overlapped);
  CHECK(staged.dv > staged.tolerance);
  CHECK(staged.dk <= staged.tolerance);
  CHECK_FALSE(staged.family_check);
}

TEST_CASE("attention_bwd: the family's check passes seq 1, where dQ and dK are exactly 0, and scales 3 and 10",
          "[attention][emu]") {
  // With one key P = 1 and dS = P (dP - D) = 0: dQ and dK hold only the rounding of dP - D, which no relative
  // check passes; their atol takes it. At scales 3 and 10 the scores' tf32 errors grow with the scale, and so
  // does the tolerance of f32 problems.
  const auto& f = backward_family();
  tuner::EmuRunner runner;
  auto check = [&](const Problem& p, std::uint64_t seed, double scale) {
    tuner::RunOptions options;
    options.seed = seed;
    if (scale > 0) options.scalars = {{"scale", scale}};
    const auto r = runner.run(f, f.default_config(p), p, options);
    INFO(p.key() << " seed " << seed << " scale " << scale << ": " << r.failure);
    CHECK(r.ok);
  };
  for (const bool causal : {false, true})
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
      check(problem("f32", 1, 16, causal, 1, 1), seed, 0);
      check(problem("bf16", 1, 80, causal, 2, 1), seed, 0);
    }
  for (const char* dtype : {"f32", "bf16"})
    for (const double scale : {3.0, 10.0}) {
      check(problem(dtype, 17, 16, false, 1, 1), 1, scale);
      check(problem(dtype, 37, 64, true, 1, 2), 2, scale);
    }
}

TEST_CASE("attention_bwd: at seq 1 a kernel that drops D from dS = P (dP - D) fails the family's check",
          "[attention][emu]") {
  // dS = P dP instead: at one key dQ = scale (dO.V) K and dK = scale (dO.V) Q, of the size the atol is a
  // tolerance of.
  auto backend = emu();
  const auto& f = backward_family();
  const Config c = config(32, 32, 2, 2, 0);  // dQ by the second pass: both passes form dS
  for (const char* dtype : {"f32", "bf16"})
    for (const bool causal : {false, true}) {
      const Problem p = problem(dtype, 1, 32, causal);
      Rendered no_d = f.render(c, p);
      for (const auto& [from, to] :
           {std::pair<std::string, std::string>{"dp[kt_][nt][i] = p * (dp[kt_][nt][i] - dd);",
                                                "dp[kt_][nt][i] = p * dp[kt_][nt][i];"},
            std::pair<std::string, std::string>{"dp[mt][nt][i] = p * (dp[mt][nt][i] - row_d[mt][i / 2]);",
                                                "dp[mt][nt][i] = p * dp[mt][nt][i];"}}) {
        const auto at = no_d.source.find(from);
        REQUIRE(at != std::string::npos);
        no_d.source.replace(at, from.size(), to);
      }
      INFO(p.key());
      CHECK(test::run_backward(*backend, c, p, false, 3).family_check);
      const auto e = test::run_backward(*backend, c, p, false, 3, &no_d);
      CHECK_FALSE(e.family_check);
    }
}

TEST_CASE("attention_bwd: tiles written unswizzled but read swizzled fail these checks", "[attention][emu]") {
  // The tile copy places chunk c of row r at chunk c instead of c ^ (r % 8)
  // (in both of its paths: whole rows per block, and the rest), while the
  // fragment loads still undo the swizzle: every product reads scrambled Q,
  // K, V and dO. Padded rows do not swizzle, so the same change leaves them
  // right.
  auto backend = emu();
  const auto& f = backward_family();
  const Problem p = problem("bf16", 70, 64, true);
  const std::string swizzled_write = "T* to = dst + Layout::offset(r, col);";
  const std::string plain_write = "T* to = dst + r * Layout::ROW + col;";
  for (const std::int64_t layout : {0, 1}) {
    const Config c = config(32, 32, 2, 2, 1, layout);
    Rendered broken = f.render(c, p);
    int replaced = 0;
    for (auto at = broken.source.find(swizzled_write); at != std::string::npos;
         at = broken.source.find(swizzled_write, at + plain_write.size()), ++replaced)
      broken.source.replace(at, swizzled_write.size(), plain_write);
    REQUIRE(replaced == 2);
    const auto e = test::run_backward(*backend, c, p, false, 3, &broken);
    INFO("smem_layout " << layout << ": dq " << e.dq << " dk " << e.dk << " dv " << e.dv);
    if (layout == 0) {
      CHECK(e.worst() <= e.tolerance);
    } else {
      CHECK(e.dq > e.tolerance);
      CHECK(e.dk > e.tolerance);
      CHECK(e.dv > e.tolerance);
    }
  }
}

TEST_CASE("attention_bwd on wgmma (mma 1, 2): head dims 64 and 128, masks, ragged lengths, key blocks, query "
          "tiles, stages and grouped heads",
          "[attention][emu]") {
  auto backend = tuner::exec::make_emu_backend({2, "sm_90"});
  const Problem grouped = multi_query();
  struct Case {
    Config c;
    Problem p;
    bool bhsd;
  };
  const Case cases[] = {
      // the candidate: 128 keys over two warpgroups, 64-query tiles, dQ's head dim split between them
      {wgmma_backward(64, 128, 2), problem("bf16", 257, 64, true), false},
      // one warpgroup, 128-query tiles (two 64-query blocks of dQ in turn), one stage
      {wgmma_backward(128, 64, 1), problem("f16", 100, 64, false, 2, 2), true},
      // two warpgroups each taking a 64-query block of dQ, four stages
      {wgmma_backward(128, 128, 4), problem("bf16", 70, 64, true), false},
      // head_dim 128 over one warpgroup: dQ in two pieces of 64 columns
      {wgmma_backward(64, 64, 2), problem("bf16", 150, 128, true), false},
      // multi-query heads summed into one K/V head; a sequence of 1
      {wgmma_backward(64, 128, 1), grouped, true},
      {wgmma_backward(64, 128, 2), problem("bf16", 1, 128, false), false},
      // overlapped: 128-query tiles over two warpgroups; head_dim 128 at four stages; one warpgroup, one stage
      {wgmma_backward(128, 128, 2, 2), problem("bf16", 257, 64, true), false},
      {wgmma_backward(64, 128, 4, 2), problem("f16", 100, 128, false, 2, 2), true},
      {wgmma_backward(64, 64, 1, 2), problem("bf16", 70, 64, true), false},
      // dQ by bulk reductions: overlapped at 128-query tiles; head_dim 128; one warpgroup taking two pieces; the
      // grouped heads adding into the same rows; ragged tails of 1 and 27 rows
      {wgmma_backward(128, 128, 2, 2, 2), problem("bf16", 257, 64, true), false},
      {wgmma_backward(64, 128, 2, 1, 2), problem("f16", 100, 128, false, 2, 2), true},
      {wgmma_backward(128, 64, 1, 1, 2), problem("bf16", 155, 64, true), false},
      {wgmma_backward(64, 128, 2, 2, 2), grouped, true},
      {wgmma_backward(64, 128, 2, 1, 2), problem("bf16", 1, 128, false), false},
  };
  for (const auto& [c, p, bhsd] : cases) test::check_backward(*backend, c, p, bhsd);
}

TEST_CASE("attention_bwd on wgmma with the warpgroups taking turns (pingpong), in turn and overlapped: head dims 64 "
          "and 128, masks, ragged lengths, query tiles, stages, dQ by bulk reductions, grouped heads, tile orders",
          "[attention][emu]") {
  auto backend = tuner::exec::make_emu_backend({2, "sm_90"});
  const Problem grouped = multi_query();
  for (const std::int64_t mma : {1, 2}) {
    INFO("mma " << mma);
    test::check_backward(*backend, wgmma_backward(128, 128, 2, mma, 1, 0, 1), problem("bf16", 257, 64, true), false);
    test::check_backward(*backend, wgmma_backward(64, 128, 4, mma, 1, 0, 1), problem("f16", 100, 128, false, 2, 2),
                         true);
    test::check_backward(*backend, wgmma_backward(64, 128, 1, mma, 2, 0, 1), grouped, true);
    test::check_backward(*backend, wgmma_backward(128, 128, 2, mma, 1, 1, 1), problem("bf16", 300, 64, true, 2, 2),
                         false);
    test::check_backward(*backend, wgmma_backward(64, 128, 2, mma, 1, 0, 1), problem("bf16", 1, 128, false), false);
  }
}

TEST_CASE("attention_bwd on wgmma taking turns: a kernel broken on purpose fails", "[attention][emu]") {
  auto backend = tuner::exec::make_emu_backend({2, "sm_90"});
  const Problem p = problem("bf16", 150, 64, true);
  for (const std::int64_t mma : {1, 2}) {
    INFO("mma " << mma);
    const Config c = wgmma_backward(128, 128, 2, mma, 1, 0, 1);
    REQUIRE(test::run_backward(*backend, c, p, false, 3).worst() <= tolerance_for("bf16"));
    // Warpgroup 0 never let start; let go after warpgroup 1's last products; never letting warpgroup 1 go.
    CHECK_THROWS_WITH(run_wgmma_broken(*backend, c, p, "turns.start();", ""), Catch::Contains("named barrier"));
    CHECK_THROWS_WITH(run_wgmma_broken(*backend, c, p, "else if (!last)", "else", true),
                      Catch::Contains("named barrier"));
    CHECK_THROWS_WITH(run_wgmma_broken(*backend, c, p, "kt::named_barrier_arrive<2, 256>();", ";", true),
                      Catch::Contains("named barrier"));
  }
}

TEST_CASE("attention_bwd on wgmma: a kernel broken on purpose fails these checks", "[attention][emu]") {
  auto backend = tuner::exec::make_emu_backend({2, "sm_90"});
  const Problem p = problem("bf16", 150, 128, true);
  const std::int64_t mma = GENERATE(1, 2);  // in turn and overlapped
  const Config c = wgmma_backward(64, 128, 2, mma);
  INFO("mma " << mma);
  REQUIRE(test::run_backward(*backend, c, p, false, 3).worst() <= tolerance_for("bf16"));
  const auto broken = [&](const std::string& from, const std::string& to) {
    return run_wgmma_broken(*backend, c, p, from, to);
  };
  // The causal mask dropped: keys after the query leak into every output.
  const auto masked = broken("(CAUSAL && query < key)", "false");
  CHECK(masked.dq > masked.tolerance);
  CHECK(masked.dk > masked.tolerance);
  CHECK(masked.dv > masked.tolerance);
  // dS^T staged at every warp's first rows instead of its own keys: dQ goes wrong, while dK (from dS^T in
  // registers) and dV do not.
  const auto staged = broken("DsLayout::offset(warp_key0 + g + 8 * r,", "DsLayout::offset(g + 8 * r,");
  CHECK(staged.dq > staged.tolerance);
  CHECK(staged.dk <= staged.tolerance);
  CHECK(staged.dv <= staged.tolerance);
  // dV's dO read with the head dim's second panel at the first one's place: dV goes wrong, not dK.
  const auto panel = broken("kt::wgmma_desc(sdot + QLayout::offset(kk * 16, 0), 1, QLayout::PANEL_BYTES, 1024)",
                            "kt::wgmma_desc(sdot + QLayout::offset(kk * 16, 0), 1, 0, 1024)");
  CHECK(panel.dv > panel.tolerance);
  CHECK(panel.dk <= panel.tolerance);
  // dS^T's odd queries minus the even ones' D: dK and dQ go wrong, not dV.
  const auto delta = broken("dp[i + 1] = s[i + 1] * (dp[i + 1] - d2.y)", "dp[i + 1] = s[i + 1] * (dp[i + 1] - d2.x)");
  CHECK(delta.dk > delta.tolerance);
  CHECK(delta.dq > delta.tolerance);
  CHECK(delta.dv <= delta.tolerance);
  if (mma == 2) {
    // Overlapped, dP^T read before the wait that covers its product: dK and dQ go wrong, not dV.
    const auto early = broken("kt::wgmma_wait<1>();  // dP^T's product", "// dP^T's product");
    CHECK(early.dk > early.tolerance);
    CHECK(early.dq > early.tolerance);
    CHECK(early.dv <= early.tolerance);
  }
}

TEST_CASE("attention_bwd's dQ by bulk reductions: a kernel broken on purpose fails these checks", "[attention][emu]") {
  // In order, each bulk reduction reads its stage at the wait that covers it, as late as a GPU may.
  auto backend = tuner::exec::make_emu_backend({2, "sm_90", env::EmuSchedule{}});
  const Problem p = problem("bf16", 150, 64, true);
  const Config c = wgmma_backward(64, 128, 2, 2, 2);
  REQUIRE(test::run_backward(*backend, c, p, false, 3).worst() <= tolerance_for("bf16"));
  const auto broken = [&](const std::string& from, const std::string& to) {
    return run_wgmma_broken(*backend, c, p, from, to);
  };
  // The stage written again before the previous step's reductions have read it: they add the wrong rows of dQ.
  const auto unwaited = broken("kt::bulk_wait_read<0>();  // the previous step's", "// the previous step's");
  CHECK(unwaited.dq > unwaited.tolerance);
  CHECK(unwaited.dk <= unwaited.tolerance);
  CHECK(unwaited.dv <= unwaited.tolerance);
  // Each row's reduction reads the stage without its pad: every row but the first is read shifted.
  const auto unpadded = broken("sdq + query * DQ_STRIDE, HEAD_DIM * 4", "sdq + query * HEAD_DIM, HEAD_DIM * 4");
  CHECK(unpadded.dq > unpadded.tolerance);
  CHECK(unpadded.dk <= unpadded.tolerance);
}

}  // namespace templates_attention_backward_emu_test
