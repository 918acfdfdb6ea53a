// Attention backward family, host side: registration and problem checks,
// space and constraints with their reasons, defaults, the register estimate
// of staged configs against ptxas, rendering, the launch plan and its
// workspace, workloads (the streaming reference, and the
// seeded sample of rows at benchmark sizes, for the forward's workload too).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "base/error.hpp"
#include "templates/attention/attention.hpp"
#include "templates/attention/compile_check.hpp"
#include "templates/attention/shapes.hpp"
#include "templates/attention/workload_common.hpp"
#include "templates/render.hpp"
#include "templates/sampled_configs.hpp"
#include "tuner/compile/compiler.hpp"

namespace templates_attention_backward_test {

using namespace ktune;
using namespace ktune::templates;
using namespace ktune::templates::attention;
using test::attention::wgmma_backward;

namespace {

Problem problem(const char* dtype, std::int64_t seq, std::int64_t head_dim, std::int64_t causal = 1,
                std::int64_t batch = 2, std::int64_t heads = 3) {
  return Problem{dtype, {{"batch", batch}, {"heads", heads}, {"seq", seq}, {"head_dim", head_dim}, {"causal", causal}}};
}
Config config(std::int64_t block_m, std::int64_t block_n, std::int64_t warps, std::int64_t stages,
              std::int64_t dq_atomic = 1, std::int64_t smem_layout = 0, std::int64_t resident_regs = 0,
              std::int64_t warp_split = 1) {
  return Config({{"block_m", block_m}, {"block_n", block_n}, {"warps", warps}, {"warp_split", warp_split},
                 {"stages", stages}, {"smem_layout", smem_layout}, {"resident_regs", resident_regs},
                 {"dq_atomic", dq_atomic}, {"mma", 0}, {"tile_order", 0}, {"pingpong", 0}});
}
std::string why_invalid(const Config& c, const Problem& p, const char* arch = "sm_90") {
  std::string why;
  CHECK_FALSE(backward_family().is_valid(c, p, DeviceLimits::for_arch(arch), &why));
  return why;
}
/// Values of an element buffer as doubles.
std::vector<double> values(const HostBuffer& b, bool expected = false) {
  const auto& bytes = expected ? b.expected : b.bytes;
  std::vector<double> v(bytes.size() / size_of(b.dtype));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = value_at(b.dtype, bytes, i);
  return v;
}

}  // namespace

TEST_CASE("attention_bwd is registered, in the training step's kernels, and rejects bad problems in one line",
          "[attention][family]") {
  const Family& f = find_family("attention_bwd");
  CHECK(&f == &backward_family());
  CHECK_NOTHROW(f.check_problem(problem("bf16", 16384, 64, 1, 1, 16)));
  CHECK_THROWS_WITH(f.check_problem(problem("bf16", 64, 48)),
                    "attention_bwd: head_dim 48 is not supported; accepted: 16, 32, 64, 80, 128");
  CHECK_THROWS_WITH(f.check_problem(problem("f64", 64, 64)),
                    Catch::StartsWith("attention_bwd: dtype 'f64' is not supported; accepted: bf16, f16, f32"));
  Problem gqa = problem("bf16", 64, 64, 1, 1, 6);
  gqa.dims["kv_heads"] = 4;
  CHECK_THROWS_WITH(f.check_problem(gqa), Catch::StartsWith("attention_bwd: kv_heads 4 must divide heads 6"));
  CHECK_THROWS_AS(f.make_workload(problem("bf16", 0, 64), 1), Error);
}

TEST_CASE("attention_bwd space, constraints and defaults", "[attention][family]") {
  const Family& f = backward_family();
  CHECK(f.space().size() == 4 * 4 * 4 * 3 * 3 * 2 * 2 * 3 * 3 * 2 * 2);
  for (const char* name :
       {"block_m", "block_n", "warps", "warp_split", "stages", "smem_layout", "resident_regs", "dq_atomic", "mma",
        "tile_order", "pingpong"})
    CHECK_FALSE(f.space().param(name).trades_off.empty());
  const auto sm90 = DeviceLimits::for_arch("sm_90");
  CHECK(f.is_valid(config(64, 64, 4, 2), problem("bf16", 1024, 64), sm90));
  CHECK(f.is_valid(config(32, 128, 4, 2, 0), problem("bf16", 1024, 32), sm90));  // two m16 tiles of keys per warp
  // The longest blocks first: orders blocks of unequal work, under a causal mask alone.
  CHECK(f.is_valid(with(config(64, 64, 4, 2), {{"tile_order", 1}}), problem("bf16", 1024, 64), sm90));
  CHECK_THAT(why_invalid(with(config(64, 64, 4, 2), {{"tile_order", 1}}), problem("bf16", 1024, 64, 0)),
             Catch::Contains("without a causal mask"));
  CHECK_THAT(why_invalid(config(64, 64, 8, 2), problem("bf16", 1024, 64)),
             Catch::Contains("block_n 64 is not a multiple of 16 x 8 groups"));
  CHECK_THAT(why_invalid(config(64, 128, 2, 2), problem("bf16", 1024, 64)),
             Catch::Contains("each warp would own 64 keys; at most 32"));
  // Registers: the dK and dV accumulators of head_dim 128 leave room for 32-query tiles, not 64; two warps
  // sharing each warp's keys halve the accumulators and S^T, dP^T: 64-query tiles fit.
  CHECK(f.is_valid(config(32, 64, 4, 2), problem("bf16", 1024, 128), sm90));
  CHECK_THAT(why_invalid(config(64, 64, 4, 2), problem("bf16", 1024, 128)), Catch::Contains("it would spill"));
  CHECK(f.is_valid(config(64, 64, 8, 2, 1, 0, 0, 2), problem("bf16", 1024, 128), sm90));
  // Warps sharing keys: whole groups, whole 16-column shares of the query tile and head dim, at most two m16
  // tiles of keys per group, and the dQ pass's own rows per warp.
  CHECK(f.is_valid(config(64, 128, 8, 2, 1, 0, 0, 2), problem("bf16", 1024, 64), sm90));
  CHECK(f.is_valid(config(64, 64, 8, 2, 1, 0, 0, 4), problem("bf16", 1024, 128), sm90));
  CHECK_THAT(why_invalid(config(64, 64, 2, 2, 1, 0, 0, 4), problem("bf16", 1024, 64)),
             Catch::Contains("warp_split 4 does not divide the block's 2 warps into whole groups"));
  CHECK_THAT(why_invalid(config(16, 64, 4, 2, 1, 0, 0, 2), problem("bf16", 1024, 64)),
             Catch::Contains("each of warp_split 2 warps takes whole 16-column pieces of the query tile (block_m 16) "
                             "and of the head dim (64)"));
  CHECK_THAT(why_invalid(config(64, 64, 4, 2, 1, 0, 0, 2), problem("bf16", 1024, 80)),
             Catch::Contains("(block_m 64) and of the head dim (80)"));
  CHECK_THAT(why_invalid(config(64, 128, 8, 2, 1, 0, 0, 4), problem("bf16", 1024, 64)),
             Catch::Contains("each warp would own 64 keys; at most 32"));
  CHECK(f.is_valid(config(64, 64, 8, 2, 1, 0, 0, 2), problem("bf16", 1024, 64), sm90));
  CHECK_THAT(why_invalid(config(64, 64, 8, 2, 0, 0, 0, 2), problem("bf16", 1024, 64)),
             Catch::Contains("each warp of the dQ pass owns whole 16-row tiles of its query rows: block_n 64 is not a "
                             "multiple of 16 x 8 warps"));
  // K and V kept in registers: 8 more per k step of the head dim, which head_dim 64 affords and 128 does not.
  CHECK(f.is_valid(config(64, 64, 4, 2, 1, 0, 1), problem("bf16", 1024, 64), sm90));
  CHECK_THAT(why_invalid(config(32, 64, 4, 2, 1, 0, 1), problem("bf16", 1024, 128)),
             Catch::Contains("fragments (K and V's kept for every k step) and copies"));
  // Shared memory: K, V, 2 x 2 stages of Q and dO tiles of 136-element rows, dS^T (64 x 40), and 2 stages
  // of the queries' lse and D (fp32).
  CHECK(backward_shared_bytes(config(32, 64, 4, 2), problem("bf16", 1024, 128)) ==
        (2 * 64 + 2 * 2 * 32) * 136 * 2 + 64 * 40 * 2 + 2 * 2 * 32 * 4);
  // Swizzled rows are packed: 128 and 32 elements.
  CHECK(backward_shared_bytes(config(32, 64, 4, 2, 1, 1), problem("bf16", 1024, 128)) ==
        (2 * 64 + 2 * 2 * 32) * 128 * 2 + 64 * 32 * 2 + 2 * 2 * 32 * 4);
  // K and V in registers: dS^T (64 x 40) takes V's tile (64 x 136), as block_m 32 <= head_dim 128; not at
  // block_m 64 > head_dim 32, nor without atomics, where there is no dS^T.
  CHECK(backward_shared_bytes(config(32, 64, 4, 2, 1, 0, 1), problem("bf16", 1024, 128)) ==
        (2 * 64 + 2 * 2 * 32) * 136 * 2 + 2 * 2 * 32 * 4);
  CHECK(backward_shared_bytes(config(64, 64, 4, 2, 1, 0, 1), problem("bf16", 1024, 32)) ==
        (2 * 64 + 2 * 2 * 64) * 40 * 2 + 64 * 72 * 2 + 2 * 2 * 64 * 4);
  // Staged: P^T and dS^T (128 x 72 each) beside K, V and the stages, whatever the dQ mode and residency.
  for (const std::int64_t atomic : {0, 1})
    CHECK(backward_shared_bytes(config(64, 128, 8, 2, atomic, 0, atomic, 2), problem("bf16", 1024, 64)) ==
          (2 * 128 + 2 * 2 * 64) * 72 * 2 + 2 * 128 * 72 * 2 + 2 * 2 * 64 * 4);
  // The second pass's kernel: Q and dO (block_n rows), 2 stages of K and V (block_m rows), no dS^T.
  CHECK(backward_shared_bytes(config(64, 32, 2, 2, 0, 1), problem("f16", 1024, 64)) ==
        std::max((2 * 32 + 2 * 2 * 64) * 64 * 2 + 2 * 2 * 64 * 4, (2 * 64 + 2 * 2 * 32) * 64 * 2));
  // (2 * 128 + 2 * 2 * 32) rows of 132 floats, dS^T (128 x 36 floats) and 2 x 2 x 32 floats of lse and D:
  // 216.5 KB fit an H100's block, not an A100's.
  CHECK(f.is_valid(config(32, 128, 8, 2), problem("f32", 1024, 128), sm90));
  CHECK_THAT(why_invalid(config(32, 128, 8, 2), problem("f32", 1024, 128), "sm_80"),
             Catch::Contains("needs 221696 bytes of shared memory (K and V tiles, 2 stages of Q and dO tiles with "
                             "their lse and D, dS^T, "
                             "in padded rows)"));
  // Packed, the same tiles take 128 x 4 and 32 x 4 bytes a row: 213504 bytes, still over an A100's 166912.
  CHECK_THAT(why_invalid(config(32, 128, 8, 2, 1, 1), problem("f32", 1024, 128), "sm_80"),
             Catch::Contains("needs 213504 bytes of shared memory (K and V tiles, 2 stages of Q and dO tiles with "
                             "their lse and D, dS^T, "
                             "in swizzled rows)"));
  // Defaults: valid for every problem class and head dim, and within an sm_80 block.
  const auto sm80 = DeviceLimits::for_arch("sm_80");
  for (const char* dtype : {"bf16", "f16", "f32"})
    for (const std::int64_t d : {16, 32, 64, 80, 128})
      for (const std::int64_t causal : {0, 1}) {
        const Problem p = problem(dtype, 1000, d, causal);
        const Config c = f.default_config(p);
        INFO(p.key() << " " << c.str());
        CHECK(f.is_valid(c, p, sm80));
        CHECK(c.at("dq_atomic") == 1);
        CHECK(c.at("smem_layout") == 0);
        CHECK(c.at("resident_regs") == 0);
        CHECK(c.at("warp_split") == 1);
      }
  CHECK(f.default_config(problem("bf16", 100, 64)).at("block_m") == 64);
  CHECK(f.default_config(problem("bf16", 100, 128)).at("block_m") == 32);
  // On a grid of 264 blocks of 128 keys or more, 16-bit types up to head_dim 64 take FlashAttention-2's
  // partition (128 keys over 4 groups of 2 warps, two m16 tiles of keys a group, 64-query tiles, swizzled rows,
  // K and V in registers; at head_dim 16 too narrow for it, 128 keys over 4 warps and 16-query tiles); head_dim
  // 80 and fp32 keep one tile of keys per warp. The 16-bit ones fit the 99 KB of shared memory of an sm_86 block.
  const Config partition({{"block_m", 64}, {"block_n", 128}, {"warps", 8}, {"warp_split", 2}, {"stages", 2},
                          {"smem_layout", 1}, {"resident_regs", 1}, {"dq_atomic", 1}, {"mma", 0},
                          {"tile_order", 0}, {"pingpong", 0}});
  const Config narrow({{"block_m", 16}, {"block_n", 128}, {"warps", 4}, {"warp_split", 1}, {"stages", 2},
                       {"smem_layout", 0}, {"resident_regs", 0}, {"dq_atomic", 1}, {"mma", 0},
                       {"tile_order", 0}, {"pingpong", 0}});
  for (const char* dtype : {"bf16", "f16", "f32"})
    for (const std::int64_t d : {16, 32, 64, 80, 128}) {
      const Problem p = problem(dtype, 16384, d, 1, 1, 16);
      const Config c = f.default_config(p);
      INFO(p.key() << " " << c.str());
      CHECK(f.is_valid(c, p, sm80));
      const bool two_tiles = std::string(dtype) != "f32" && d <= 64;
      if (two_tiles) CHECK(f.is_valid(c, p, DeviceLimits::for_arch("sm_86")));
      CHECK(c.at("block_n") / (16 * c.at("warps") / c.at("warp_split")) == (two_tiles ? 2 : 1));
      if (two_tiles) CHECK(c == (d > 16 ? partition : narrow));
    }
  CHECK(f.default_config(problem("bf16", 4224, 64, 1, 1, 8)).at("block_n") == 128);  // 33 x 8 = 264 blocks
  CHECK(f.default_config(problem("bf16", 4096, 64, 1, 1, 8)).at("block_n") == 64);   // 256
}

TEST_CASE("attention_bwd: staged configs the register estimate admits at its edge compile without spilling",
          "[attention][family][compile]") {
  // P^T and dS^T staged: FlashAttention-2's partition of the leaderboard's backward (128 keys over 4 groups of 2
  // warps, 128-query tiles: estimated at 268 before the staged relief; its 176 KB of shared memory fit an H100's
  // block, not an A100's) and 128 keys over one group of 2 warps at head_dim 32 with K and V in registers
  // (264), both admitted; an fp32 config estimated at 272, which spills 4 bytes at sm_90, rejected.
  const auto& f = backward_family();
  const tuner::Compiler compiler;
  struct Case {
    Config c;
    Problem p;
    std::vector<const char*> archs;
  };
  const Case admitted[] = {{config(128, 128, 8, 2, 1, 0, 0, 2), problem("bf16", 16384, 64, 1, 1, 16), {"sm_90"}},
                           {config(128, 32, 2, 2, 1, 0, 1, 2), problem("bf16", 1024, 32), {"sm_80", "sm_90"}}};
  for (const auto& [c, p, archs] : admitted)
    for (const char* arch : archs) {
      INFO(p.key() << " " << c.str() << " " << arch);
      REQUIRE(f.is_valid(c, p, DeviceLimits::for_arch(arch)));
      test::check_compiles_without_spill(compiler, f, c, p, arch);
    }
  CHECK_THAT(why_invalid(config(64, 16, 4, 2, 1, 1, 1, 4), problem("f32", 1024, 128)),
             Catch::Contains("about 288 registers"));
  // The same partition with one stage spilled 8 to 56 bytes at sm_90 (rejected); with two it does not (above).
  CHECK_THAT(why_invalid(config(128, 128, 8, 1, 1, 0, 0, 2), problem("bf16", 16384, 64, 1, 1, 16)),
             Catch::Contains("split 2 ways, one stage"));
}

TEST_CASE("attention_bwd: tiles whose copies cannot walk one pointer are estimated with an address per copy",
          "[attention][family][compile]") {
  // One warp copying 64-query tiles of head_dim 64 (bf16): in padded rows a thread's copies are 4 rows apart and
  // walk one pointer (estimated at 232, admitted, no spill); in swizzled rows (a period of 8 rows) each copy has an
  // address of its own, and the same config spilled 40 to 112 bytes at sm_80 and sm_90 (264, rejected).
  const auto& f = backward_family();
  const tuner::Compiler compiler;
  const Problem p = problem("bf16", 1000, 64, 0);
  const Config padded = config(64, 16, 1, 2, 0, 0), swizzled = config(64, 16, 1, 2, 0, 1);
  for (const char* arch : {"sm_80", "sm_90"}) {
    INFO(arch);
    REQUIRE(f.is_valid(padded, p, DeviceLimits::for_arch(arch)));
    test::check_compiles_without_spill(compiler, f, padded, p, arch);
    CHECK_THAT(why_invalid(swizzled, p, arch),
               Catch::Contains("about 264 registers") && Catch::Contains("copies (each at an address of its own)"));
  }
}

TEST_CASE("attention_bwd rendering and plan: three kernels, dQ by atomics or a second pass, the workspace",
          "[attention][family]") {
  const auto& f = backward_family();
  const Problem p = problem("f16", 1000, 80, 1, 2, 6);
  const Rendered atomic = f.render(config(32, 64, 4, 2, 1), p);
  REQUIRE(atomic.kernels.size() == 3);
  CHECK(atomic.kernels[0] == "attention::attention_bwd_preprocess<80, true, __half>");
  CHECK(atomic.kernels[1] == "attention::attention_bwd_dkdv<80, 32, 64, 4, 1, 2, 0, false, true, true, __half>");
  CHECK(atomic.kernels[2] == "attention::attention_bwd_dq_convert<80, __half>");
  const Rendered second = f.render(config(32, 64, 4, 2, 0), p);
  CHECK(second.kernels[2] == "attention::attention_bwd_dq<80, 32, 64, 4, 2, 0, false, true, __half>");
  const Rendered swizzled = f.render(config(32, 64, 4, 2, 0, 1, 1), p);
  CHECK(swizzled.kernels[1] == "attention::attention_bwd_dkdv<80, 32, 64, 4, 1, 2, 1, true, false, true, __half>");
  CHECK(swizzled.kernels[2] == "attention::attention_bwd_dq<80, 32, 64, 4, 2, 1, true, true, __half>");
  // Warps sharing keys: the dK/dV kernel's fifth argument; the second pass has no such parameter.
  const Rendered split = f.render(config(32, 64, 4, 2, 0, 0, 0, 2), problem("f16", 1000, 64, 1, 2, 6));
  CHECK(split.kernels[1] == "attention::attention_bwd_dkdv<64, 32, 64, 4, 2, 2, 0, false, false, true, __half>");
  CHECK(split.kernels[2] == "attention::attention_bwd_dq<64, 32, 64, 4, 2, 0, false, true, __half>");
  // Shapes share a text.
  CHECK(f.render(config(32, 64, 4, 2), problem("f16", 5, 80, 1, 1, 1)).source == atomic.source);

  const std::size_t rows = 2 * 6 * 1000;
  CHECK(f.workspace_bytes(config(32, 64, 4, 2, 0), p) == rows * 4);
  CHECK(f.workspace_bytes(config(32, 64, 4, 2, 1), p) == rows * 4 + rows * 80 * 4);
  BackwardArgs a;
  a.q = 0x10000, a.k = 0x20000, a.v = 0x30000, a.o = 0x40000, a.lse = 0x50000, a.dout = 0x60000;
  a.dq = 0x70000, a.dk = 0x80000, a.dv = 0x90000, a.workspace = 0xa0000;
  const AttentionShape s = shape_of(p);
  a.q_strides = a.o_strides = a.do_strides = a.dq_strides = bshd_strides(s);
  a.k_strides = a.v_strides = a.dk_strides = a.dv_strides = kv_strides(s);
  a.scale = default_scale(80);
  for (const std::int64_t mode : {0, 1}) {
    const Config c = config(32, 64, 4, 2, mode);
    const auto launches = f.plan(c, p, a, DeviceLimits::for_arch("sm_90"));
    REQUIRE(launches.size() == 3);
    CHECK(launches[0].grid == std::array<unsigned, 3>{125, 6, 2});  // 8 rows per block
    CHECK(launches[1].grid == std::array<unsigned, 3>{16, 6, 2});   // 64 keys per block, per K/V head
    CHECK(launches[1].block[0] == 128);
    CHECK(launches[1].dynamic_smem == backward_shared_bytes(c, p));
    if (mode == 0) CHECK(launches[2].grid == std::array<unsigned, 3>{16, 6, 2});
    if (mode == 1) CHECK(launches[2].grid == std::array<unsigned, 3>{157, 6, 2});  // two elements per thread
  }
  BackwardArgs bad = a;
  bad.workspace = 0;
  CHECK_THROWS_WITH(f.plan(config(32, 64, 4, 2), p, bad, DeviceLimits::for_arch("sm_90")),
                    Catch::StartsWith("attention_bwd: no workspace given"));
  bad = a;
  bad.dk = 0x80002;
  CHECK_THROWS_WITH(f.plan(config(32, 64, 4, 2), p, bad, DeviceLimits::for_arch("sm_90")),
                    "attention_bwd: buffer 'dk' at 0x80002 is not aligned to 16 bytes");
  bad = a;
  bad.do_strides.seq = 84;
  CHECK_THROWS_WITH(f.plan(config(32, 64, 4, 2), p, bad, DeviceLimits::for_arch("sm_90")),
                    Catch::Contains("strides of 'do'"));
  // FLOPs: 2.5 x the forward's.
  CHECK(f.flops(p) == Approx(2.5 * forward_family().flops(p)));
  // The wgmma dK/dV pass between the same pre-kernel and conversion, compiled for sm_90a on sm_90; the plan's
  // second launch is its: 64 keys a warpgroup, the shared memory of K, V, the Q and dO stages, dS^T and the rows.
  const Problem w = problem("bf16", 1000, 128, 1, 2, 6);
  const Rendered hopper = f.render(wgmma_backward(64, 128, 2), w);
  REQUIRE(hopper.kernels.size() == 3);
  CHECK(hopper.kernels[0] == "attention::attention_bwd_preprocess<128, true, __nv_bfloat16>");
  CHECK(hopper.kernels[1] ==
        "attention::attention_bwd_dkdv_wgmma<128, 64, 128, 2, 2, false, false, false, true, __nv_bfloat16>");
  CHECK(f.render(wgmma_backward(64, 128, 2, 2), w).kernels[1] ==
        "attention::attention_bwd_dkdv_wgmma<128, 64, 128, 2, 2, true, false, false, true, __nv_bfloat16>");
  CHECK(f.render(wgmma_backward(64, 128, 2, 1, 2), w).kernels[1] ==
        "attention::attention_bwd_dkdv_wgmma<128, 64, 128, 2, 2, false, true, false, true, __nv_bfloat16>");
  CHECK(f.render(wgmma_backward(64, 128, 2, 1, 1, 0, 1), w).kernels[1] ==
        "attention::attention_bwd_dkdv_wgmma<128, 64, 128, 2, 2, false, false, true, true, __nv_bfloat16>");
  CHECK(hopper.kernels[2] == "attention::attention_bwd_dq_convert<128, __nv_bfloat16>");
  CHECK(hopper.arch_specific);
  CHECK_FALSE(atomic.arch_specific);
  a.q_strides = a.o_strides = a.do_strides = a.dq_strides = bshd_strides(shape_of(w));
  a.k_strides = a.v_strides = a.dk_strides = a.dv_strides = kv_strides(shape_of(w));
  const auto launches = f.plan(wgmma_backward(64, 128, 2), w, a, DeviceLimits::for_arch("sm_90"));
  CHECK(launches[1].grid == std::array<unsigned, 3>{8, 6, 2});
  CHECK(launches[1].block[0] == 256);
  CHECK(launches[1].dynamic_smem == (2 * 128 + 2 * 2 * 64) * 128 * 2 + 128 * 64 * 2 + 2 * 2 * 64 * 4);
  // With dQ by bulk reductions, the dQ stage besides: 64 fp32 rows of 128 + 8.
  const auto bulk = f.plan(wgmma_backward(64, 128, 2, 1, 2), w, a, DeviceLimits::for_arch("sm_90"));
  CHECK(bulk[1].dynamic_smem == launches[1].dynamic_smem + 64 * (128 + 8) * 4);
  CHECK(bulk.size() == launches.size());
  // The dK/dV pass's arguments: 9 buffers, 6 strides, seq, heads, kv_group, scale and the tile order.
  CHECK(launches[1].args.count() == 20);
}

TEST_CASE("attention_bwd's wgmma pass (mma 1 and 2) is valid on sm_90 alone, for its shapes, saying why not",
          "[attention][family]") {
  const auto& f = backward_family();
  const auto sm90 = DeviceLimits::for_arch("sm_90");
  std::string why;
  const auto invalid = [&](const Config& c, const Problem& p, const char* arch = "sm_90") {
    why.clear();
    CHECK_FALSE(f.is_valid(c, p, DeviceLimits::for_arch(arch), &why));
    return why;
  };
  CHECK(f.is_valid(wgmma_backward(64, 128), problem("bf16", 1024, 64), sm90));
  CHECK(f.is_valid(wgmma_backward(128, 128, 4), problem("f16", 1024, 64), sm90));
  CHECK(f.is_valid(wgmma_backward(64, 64, 1), problem("bf16", 1024, 128), DeviceLimits::for_arch("sm_90a")));
  CHECK_THAT(invalid(wgmma_backward(64, 128), problem("bf16", 1024, 64), "sm_80"),
             Catch::Contains("needs an sm_90 device"));
  CHECK_THAT(invalid(wgmma_backward(64, 128), problem("f32", 1024, 64)), Catch::Contains("16-bit inputs"));
  CHECK_THAT(invalid(wgmma_backward(64, 128), problem("bf16", 1024, 80)), Catch::Contains("head dims 64 and 128"));
  CHECK_THAT(invalid(with(wgmma_backward(64, 128), {{"warps", 4}}), problem("bf16", 1024, 64)),
             Catch::Contains("warps block_n / 16"));
  CHECK_THAT(invalid(wgmma_backward(32, 128), problem("bf16", 1024, 64)), Catch::Contains("block_m is 64 or 128"));
  CHECK_THAT(invalid(with(wgmma_backward(64, 128), {{"dq_atomic", 0}}), problem("bf16", 1024, 64)),
             Catch::Contains("dq_atomic 1"));
  CHECK_THAT(invalid(with(wgmma_backward(64, 128), {{"smem_layout", 0}}), problem("bf16", 1024, 64)),
             Catch::Contains("smem_layout 1"));
  // Registers: 128-query tiles at head_dim 128 hold S^T, dP^T, dK and dV of 128 columns each.
  CHECK_THAT(invalid(wgmma_backward(128, 128), problem("bf16", 1024, 128)), Catch::Contains("registers"));
  // Overlapped: as in turn over two warpgroups; over one, 128-query tiles (and at head_dim 128 64-query
  // tiles) spill, 64-query tiles at head_dim 64 do not.
  CHECK(f.is_valid(wgmma_backward(128, 128, 2, 2), problem("bf16", 1024, 64), sm90));
  CHECK(f.is_valid(wgmma_backward(64, 128, 4, 2), problem("f16", 1024, 128), sm90));
  CHECK(f.is_valid(wgmma_backward(64, 64, 1, 2), problem("bf16", 1024, 64), sm90));
  CHECK(f.is_valid(wgmma_backward(128, 64, 2, 1), problem("bf16", 1024, 64), sm90));
  CHECK_THAT(invalid(wgmma_backward(128, 64, 2, 2), problem("bf16", 1024, 64)),
             Catch::Contains("overlapped in one warpgroup"));
  CHECK_THAT(invalid(wgmma_backward(64, 64, 2, 2), problem("bf16", 1024, 128)), Catch::Contains("mma 2: wgmma"));
  CHECK_THAT(invalid(wgmma_backward(64, 128, 2, 2), problem("bf16", 1024, 64), "sm_80"),
             Catch::Contains("mma 2: wgmma needs an sm_90 device"));
  // dQ by bulk reductions: the wgmma pass's, its dQ stage in the shared memory count.
  CHECK(f.is_valid(wgmma_backward(128, 128, 2, 2, 2), problem("bf16", 1024, 64), sm90));
  CHECK(f.is_valid(wgmma_backward(128, 128, 4, 1, 1), problem("bf16", 1024, 64), sm90));
  CHECK_THAT(invalid(wgmma_backward(128, 128, 4, 1, 2), problem("bf16", 1024, 64)),
             Catch::Contains("the dQ stage"));
  CHECK_THAT(invalid(with(config(32, 64, 4, 2), {{"dq_atomic", 2}}), problem("bf16", 1024, 64)),
             Catch::Contains("dq_atomic 2"));
}

TEST_CASE("attention_bwd workloads: fresh inputs per seed, the streaming reference, every row checked when cheap",
          "[attention][family]") {
  const auto& f = backward_family();
  const Problem p = problem("bf16", 33, 32, 1, 1, 2);
  const auto w = f.make_workload(p, 1);
  REQUIRE(w.buffers.size() == 10);
  const char* names[] = {"q", "k", "v", "o", "lse", "do", "dq", "dk", "dv", "scratch"};
  for (std::size_t i = 0; i < 10; ++i) CHECK(w.buffers[i].name == names[i]);
  CHECK(w.buffers[6].role == Role::kOutput);
  CHECK(w.buffers[9].role == Role::kScratch);
  for (const auto& c :
       test::sampled_configs(f, p, DeviceLimits::for_arch("sm_90"), 8))  // the scratch serves every config
    CHECK(w.buffers[9].bytes.size() >= f.workspace_bytes(c, p));
  CHECK(w.buffers[6].tolerance == tolerance_for("bf16"));
  CHECK(f.make_workload(problem("f32", 33, 32, 1, 1, 2), 1).buffers[7].tolerance == kTf32BackwardTolerance);
  CHECK(f.make_workload(p, 2).buffers[0].bytes != w.buffers[0].bytes);
  // Every row of a small problem is checked: no q or dO row is zero.
  const auto q = values(w.buffers[0]);
  for (std::size_t row = 0; row < q.size() / 32; ++row) {
    double norm = 0;
    for (std::size_t d = 0; d < 32; ++d) norm += std::abs(q[row * 32 + d]);
    CHECK(norm > 0);
  }
  // dv of the last key under a causal mask: only the last query sees it, dv = P dO = exp(s - lse) dO.
  const auto dv = values(w.buffers[8], true);
  CHECK(std::isfinite(dv.back()));
}

TEST_CASE("attention_bwd's dQ and dK pass an RMS error of a tolerance of their cancellation's scale, about what "
          "the relative check passes where they are not 0",
          "[attention][family]") {
  const auto& f = backward_family();
  const auto rms = [](const std::vector<double>& x) {
    double sum = 0;
    for (const double v : x) sum += v * v;
    return std::sqrt(sum / static_cast<double>(x.size()));
  };
  for (const char* dtype : {"f32", "bf16"})
    for (const std::int64_t causal : {0, 1}) {
      INFO(dtype << " causal " << causal);
      // One key: dQ and dK are exactly 0.
      const Workload one = f.make_workload(problem(dtype, 1, 16, causal, 2, 2), 4);
      const auto q = values(one.buffers[0]), dout = values(one.buffers[5]);
      const double unit = default_scale(16) * 4 * rms(values(one.buffers[2]));  // scale sqrt(d) RMS(V)
      const double tolerance = backward_tolerance(problem(dtype, 1, 16));
      CHECK(rms(values(one.buffers[6], true)) == 0);
      CHECK(rms(values(one.buffers[7], true)) == 0);
      CHECK(one.buffers[6].atol == Approx(tolerance * unit * rms(dout) * rms(values(one.buffers[1]))));
      // dK's: RMS(dO_i) RMS(q_i) row by row (each of the 4 rows its own K/V row).
      double rows = 0;
      for (std::size_t r = 0; r < 4; ++r) {
        const auto row = [&](const std::vector<double>& x) {
          return rms(std::vector<double>(x.begin() + static_cast<std::ptrdiff_t>(16 * r),
                                         x.begin() + static_cast<std::ptrdiff_t>(16 * r + 16)));
        };
        rows += row(dout) * row(dout) * row(q) * row(q);
      }
      CHECK(one.buffers[7].atol == Approx(tolerance * unit * std::sqrt(rows / 4)));
      CHECK(one.buffers[8].atol == 0);  // dV = P^T dO cancels nothing
      // Many keys: the atol is about what the relative check passes already (1.1 to 1.5 times here: dP - D
      // spreads a little less than dP, and under a causal mask the rows of few keys weigh more in it).
      const Workload many = f.make_workload(problem(dtype, 70, 32, causal, 1, 2), 4);
      for (const std::size_t i : {6, 7}) {
        const HostBuffer& b = many.buffers[i];
        INFO(b.name << " atol " << b.atol << " RMS " << rms(values(b, true)));
        CHECK(b.atol <= 2 * b.tolerance * rms(values(b, true)));
      }
    }
}

TEST_CASE("attention workloads at benchmark size check a seeded sample of rows, and every element stays exact",
          "[attention][family]") {
  // 4 heads x seq 4096 x head_dim 64, causal: the whole reference would be
  // ~6e9 multiply-adds for the backward; the sample stays within the budget.
  const Problem p = problem("bf16", 4096, 64, 1, 1, 4);
  const AttentionShape s = shape_of(p);
  const auto checked = sample_rows(s, 9, 6.0);
  std::size_t heads_sampled = 0, rows_sampled = 0;
  double cost = 0;
  for (std::int64_t bh = 0; bh < 4; ++bh) {
    std::size_t n = 0;
    for (std::int64_t i = 0; i < 4096; ++i)
      if (checked[static_cast<std::size_t>(bh * 4096 + i)]) {
        ++n;
        cost += 6.0 * 64 * static_cast<double>(i + 1);
      }
    if (n) {
      ++heads_sampled;
      CHECK(checked[static_cast<std::size_t>(bh * 4096 + 4095)]);  // the last row, which sees every key
    }
    rows_sampled += n;
  }
  CHECK(heads_sampled == 2);
  CHECK(rows_sampled > 100);
  CHECK(cost <= kReferenceBudget + 6.0 * 64 * 4096);
  CHECK(sample_rows(s, 9, 6.0) == checked);   // seeded
  CHECK(sample_rows(s, 10, 6.0) != checked);  // and fresh per seed
  CHECK(sample_rows(shape_of(problem("bf16", 257, 128, 0, 1, 2)), 1, 6.0) ==
        std::vector<std::uint8_t>(2 * 257, 1));  // test sizes: every row

  // The backward's workload: rows outside the sample have q = 0 and dO = 0,
  // so their dQ is exactly 0, their O the mean of the V rows they see and
  // their lse the log of how many.
  const auto w = backward_family().make_workload(p, 9);
  const auto q = values(w.buffers[0]), dout = values(w.buffers[5]), dq = values(w.buffers[6], true);
  const auto o = values(w.buffers[3]), v = values(w.buffers[2]), lse = values(w.buffers[4]);
  std::size_t zero_rows = 0;
  for (std::int64_t i = 0; i < 4096; ++i)
    for (std::int64_t h = 0; h < 4; ++h) {
      const auto row = static_cast<std::size_t>((i * 4 + h) * 64);
      if (checked[static_cast<std::size_t>(h * 4096 + i)]) continue;
      ++zero_rows;
      for (std::size_t d = 0; d < 64; ++d) {
        REQUIRE(q[row + d] == 0);
        REQUIRE(dout[row + d] == 0);
        REQUIRE(dq[row + d] == 0);
      }
      if (i == 9) {  // O = mean of v_0 .. v_9, lse = log 10
        double mean = 0;
        for (std::int64_t j = 0; j < 10; ++j) mean += v[static_cast<std::size_t>((j * 4 + h) * 64)] / 10;
        CHECK(o[row] == Approx(mean).margin(1e-2));
        CHECK(lse[static_cast<std::size_t>(h * 4096 + i)] == Approx(std::log(10.0)));
      }
    }
  CHECK(zero_rows > 4 * 4096 / 2);
  // The forward's workload samples the same way.
  const auto fw = forward_family().make_workload(p, 9);
  const auto fq = values(fw.buffers[0]);
  std::size_t fzero = 0;
  for (std::size_t row = 0; row < fq.size() / 64; ++row) fzero += fq[row * 64] == 0 && fq[row * 64 + 1] == 0;
  CHECK(fzero > 4 * 4096 / 2);
}

TEST_CASE("attention workloads at benchmark size are timed on q and dO as drawn, and check the sample's rows apart",
          "[attention][family]") {
  const Problem p = problem("bf16", 4096, 64, 1, 1, 4);
  const AttentionShape s = shape_of(p);
  const auto fw = forward_family().make_workload(p, 9), bw = backward_family().make_workload(p, 9);
  const auto checked = sample_rows(s, 9, 3.0);
  // Timed runs start from q (and dO) as drawn: the sample's rows as checked, the others random where the check's
  // are zeros.
  for (const auto* b : {&fw.buffers[0], &bw.buffers[0], &bw.buffers[5]}) {
    INFO(b->name);
    REQUIRE(b->timed.size() == b->bytes.size());
    HostBuffer timed = *b;
    timed.bytes = b->timed;
    const auto drawn = values(timed), as_checked = values(*b);
    std::size_t random_rows = 0;
    for (std::size_t row = 0; row < drawn.size() / 64; ++row) {
      const bool zero = as_checked[row * 64] == 0 && as_checked[row * 64 + 1] == 0;
      const auto at = static_cast<std::ptrdiff_t>(row * 64);
      if (!zero) CHECK(std::equal(drawn.begin() + at, drawn.begin() + at + 64, as_checked.begin() + at));
      random_rows += zero && drawn[row * 64] != 0;
    }
    CHECK(random_rows > 4 * 4096 / 2);
  }
  CHECK(fw.buffers[1].timed.empty());  // k and v are drawn in full for the check too
  CHECK(forward_family().make_workload(problem("bf16", 257, 64, 1, 1, 2), 1).buffers[0].timed.empty());

  // An error of 2 % in the sample's rows of O alone fails, though over the whole buffer, whose other rows are exact
  // means of V, it is within bf16's tolerance (16 heads: the sample takes rows of two).
  const Problem wide = problem("bf16", 4096, 64, 1, 1, 16);
  const auto wide_checked = sample_rows(shape_of(wide), 9, 3.0);
  const HostBuffer o = forward_family().make_workload(wide, 9).buffers[3];
  REQUIRE(o.apart.size() == o.elements());
  std::vector<std::byte> got = o.expected;
  std::size_t flagged = 0, misflagged = 0;
  for (std::size_t i = 0; i < o.elements(); ++i) {
    const std::size_t row = i / 64, seq = row / 16, head = row % 16;
    misflagged += o.apart[i] != wide_checked[head * 4096 + seq];
    if (!o.apart[i]) continue;
    ++flagged;
    const std::uint16_t bits = float_to_bf16_bits(static_cast<float>(value_at(DType::kBF16, o.expected, i) * 1.02));
    std::memcpy(got.data() + i * 2, &bits, 2);
  }
  CHECK(misflagged == 0);
  CHECK(flagged > 100 * 64);
  CHECK(within_tolerance(o, o.expected, relative_error(o, o.expected)));
  INFO("apart " << relative_error(o, got) << ", tolerance " << o.tolerance);
  CHECK(relative_error(o, got) > o.tolerance);
  CHECK_FALSE(within_tolerance(o, got, relative_error(o, got)));
  HostBuffer whole = o;
  whole.apart.clear();
  INFO("whole " << relative_error(whole, got));
  CHECK(within_tolerance(whole, got, relative_error(whole, got)));  // what the check said before
  CHECK(fw.buffers[4].apart == checked);  // lse: (batch, heads, seq), as the sample's flags
}

TEST_CASE("attention_backward_streaming matches the materialising backward", "[attention][reference]") {
  AttentionShape s{.batch = 2, .seq = 19, .heads = 2, .head_dim = 8, .causal = true};
  s.kv_heads = 2;
  for (const bool causal : {true, false}) {
    s.causal = causal;
    const auto n = static_cast<std::size_t>(s.batch * s.seq * s.heads * s.head_dim);
    std::mt19937_64 rng(3);
    std::uniform_real_distribution<double> u(-1, 1);
    std::vector<double> q(n), k(n), v(n), dout(n);
    for (auto* t : {&q, &k, &v, &dout})
      for (auto& x : *t) x = u(rng);
    std::vector<double> probs(static_cast<std::size_t>(s.batch * s.heads * s.seq * s.seq)), out(n),
        scratch(static_cast<std::size_t>(scratch_elements(s)));
    attention_forward<double>(q.data(), k.data(), v.data(), probs.data(), out.data(), scratch.data(), s, 0, 4);
    std::vector<double> dq(n), dk(n), dv(n);
    attention_backward<double>(q.data(), k.data(), v.data(), probs.data(), dout.data(), dq.data(), dk.data(),
                               dv.data(), scratch.data(), s, 0, 4);
    std::vector<double> o2(n), lse(static_cast<std::size_t>(s.batch * s.heads * s.seq));
    const auto st = bshd_strides(s);
    const double scale = 1 / std::sqrt(8.0);
    attention_forward_streaming<double>(q.data(), k.data(), v.data(), o2.data(), lse.data(), s, st, st, st, st, scale,
                                        0, 4);
    std::vector<double> dq2(n), dk2(n), dv2(n);
    attention_backward_streaming<double>(q.data(), k.data(), v.data(), o2.data(), lse.data(), dout.data(),
                                         dq2.data(), dk2.data(), dv2.data(), s, st, st, scale, 0, 4);
    for (std::size_t i = 0; i < n; ++i) {
      REQUIRE(dq2[i] == Approx(dq[i]).margin(1e-12));
      REQUIRE(dk2[i] == Approx(dk[i]).margin(1e-12));
      REQUIRE(dv2[i] == Approx(dv[i]).margin(1e-12));
    }
  }
}

TEST_CASE("attention_backward_streaming: a K/V head's dK and dV sum over the query heads that read it",
          "[attention][reference]") {
  // Grouped (kv_heads 1 of 3 heads) against the same problem with K and V
  // repeated per head: dQ equal, dK and dV the sums over the three heads.
  AttentionShape s{.batch = 1, .seq = 13, .heads = 3, .head_dim = 8, .causal = true};
  AttentionShape g = s;
  g.kv_heads = 1;
  const auto n = static_cast<std::size_t>(13 * 3 * 8), kv_n = static_cast<std::size_t>(13 * 8);
  std::mt19937_64 rng(4);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> q(n), dout(n), k1(kv_n), v1(kv_n);
  for (auto* t : {&q, &dout, &k1, &v1})
    for (auto& x : *t) x = u(rng);
  std::vector<double> k(n), v(n);  // repeated per head, (seq, heads, d)
  for (std::size_t i = 0; i < 13; ++i)
    for (std::size_t h = 0; h < 3; ++h)
      for (std::size_t d = 0; d < 8; ++d) {
        k[(i * 3 + h) * 8 + d] = k1[i * 8 + d];
        v[(i * 3 + h) * 8 + d] = v1[i * 8 + d];
      }
  const auto st = bshd_strides(s), kv_st = kv_strides(shape_of(Problem{"f32", {{"batch", 1}, {"heads", 3},
                                                                               {"kv_heads", 1}, {"seq", 13},
                                                                               {"head_dim", 8}, {"causal", 1}}}));
  std::vector<double> o(n), lse(39);
  attention_forward_streaming<double>(q.data(), k.data(), v.data(), o.data(), lse.data(), s, st, st, st, st, 0.3, 0,
                                      3);
  std::vector<double> dq(n), dk(n), dv(n), dq1(n), dk1(kv_n), dv1(kv_n);
  attention_backward_streaming<double>(q.data(), k.data(), v.data(), o.data(), lse.data(), dout.data(), dq.data(),
                                       dk.data(), dv.data(), s, st, st, 0.3, 0, 3);
  attention_backward_streaming<double>(q.data(), k1.data(), v1.data(), o.data(), lse.data(), dout.data(), dq1.data(),
                                       dk1.data(), dv1.data(), g, st, kv_st, 0.3, 0, 1);
  for (std::size_t i = 0; i < n; ++i) REQUIRE(dq1[i] == Approx(dq[i]).margin(1e-12));
  for (std::size_t i = 0; i < 13; ++i)
    for (std::size_t d = 0; d < 8; ++d) {
      double sk = 0, sv = 0;
      for (std::size_t h = 0; h < 3; ++h) {
        sk += dk[(i * 3 + h) * 8 + d];
        sv += dv[(i * 3 + h) * 8 + d];
      }
      REQUIRE(dk1[i * 8 + d] == Approx(sk).margin(1e-12));
      REQUIRE(dv1[i * 8 + d] == Approx(sv).margin(1e-12));
    }
}

}  // namespace templates_attention_backward_test
