// Attention forward family, host side: problems, space, constraints with
// their reasons, rendering, workloads and the launch plan.
#include "templates/attention/attention.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <set>

#include "base/error.hpp"
#include "templates/attention/compile_check.hpp"
#include "templates/attention/shapes.hpp"
#include "templates/attention/workload_common.hpp"
#include "templates/render.hpp"
#include "tuner/compile/compiler.hpp"
#include "tuner/session/tuned_kernels.hpp"

namespace templates_attention_family_test {

using namespace ktune;
using namespace ktune::templates;
using namespace ktune::templates::attention;
using test::attention::wgmma_backward;
using test::attention::wgmma_forward;

namespace {

Problem problem(const char* dtype, std::int64_t seq, std::int64_t head_dim, std::int64_t causal = 1,
                std::int64_t batch = 2, std::int64_t heads = 3) {
  return Problem{dtype, {{"batch", batch}, {"heads", heads}, {"seq", seq}, {"head_dim", head_dim}, {"causal", causal}}};
}
Config config(std::int64_t block_m, std::int64_t block_n, std::int64_t warps, std::int64_t stages,
              std::int64_t kv_layout = 0, std::int64_t q_regs = 1) {
  return Config({{"block_m", block_m}, {"block_n", block_n}, {"warps", warps}, {"stages", stages},
                 {"kv_layout", kv_layout}, {"q_regs", q_regs}, {"tile_order", 0}, {"mma", 0},
                 {"pingpong", 0}});
}
std::string why_invalid(const Config& c, const Problem& p, const char* arch = "sm_90") {
  std::string why;
  CHECK_FALSE(forward_family().is_valid(c, p, DeviceLimits::for_arch(arch), &why));
  return why;
}

}  // namespace

TEST_CASE("attention_fwd is registered and rejects bad problems with one line saying what is accepted",
          "[attention][family]") {
  const Family& f = find_family("attention_fwd");
  CHECK(&f == &forward_family());
  CHECK_NOTHROW(f.check_problem(problem("bf16", 1, 16, 0)));
  CHECK_NOTHROW(f.check_problem(problem("f16", 16384, 128, 1)));
  CHECK_NOTHROW(f.check_problem(problem("bf16", 1024, 80, 1)));
  CHECK_THROWS_WITH(f.check_problem(problem("bf16", 64, 48)),
                    "attention_fwd: head_dim 48 is not supported; accepted: 16, 32, 64, 80, 128");
  CHECK_NOTHROW(f.check_problem(problem("f32", 64, 64)));  // on the tf32 matrix units
  CHECK_THROWS_WITH(f.check_problem(problem("f64", 64, 64)),
                    Catch::StartsWith("attention_fwd: dtype 'f64' is not supported; accepted: bf16, f16, f32"));
  CHECK_THROWS_WITH(f.check_problem(problem("bf16", 0, 64)),
                    "attention_fwd: dimension 'seq' must be in 1..1073741824");
  CHECK_THROWS_WITH(f.check_problem(problem("bf16", 64, 64, 2)), Catch::Contains("'causal' must be in 0..1"));
  CHECK_THROWS_WITH(f.check_problem(problem("bf16", 64, 64, 1, 0)), Catch::Contains("'batch' must be in 1..65535"));
  CHECK_THROWS_WITH(f.check_problem(problem("bf16", 64, 64, 1, 1, 70000)),
                    Catch::Contains("'heads' must be in 1..65535"));
  Problem extra = problem("bf16", 64, 64);
  extra.dims["groups"] = 1;
  CHECK_THROWS_WITH(f.check_problem(extra), Catch::Contains("unknown dimension 'groups'; accepted: batch, heads, "
                                                            "kv_heads (optional), seq, head_dim, causal"));
  // Grouped-query attention: kv_heads divides heads.
  Problem gqa = problem("bf16", 64, 64, 1, 2, 6);
  for (const std::int64_t kv : {1, 2, 3, 6}) {
    gqa.dims["kv_heads"] = kv;
    CHECK_NOTHROW(f.check_problem(gqa));
  }
  for (const std::int64_t kv : {0, 4, 12}) {
    gqa.dims["kv_heads"] = kv;
    CHECK_THROWS_WITH(f.check_problem(gqa), "attention_fwd: kv_heads " + std::to_string(kv) +
                                                " must divide heads 6 (each K/V head serves heads / kv_heads query "
                                                "heads)");
  }
  Problem missing = problem("bf16", 64, 64);
  missing.dims.erase("head_dim");
  CHECK_THROWS_WITH(f.check_problem(missing), Catch::Contains("head_dim (missing) is not supported"));
  // Nothing is made for a bad problem.
  CHECK_THROWS_AS(f.make_workload(problem("bf16", 0, 64), 1), Error);
  CHECK_THROWS_AS(f.default_config(problem("bf16", 64, 48)), Error);
}

TEST_CASE("attention problems whose tensors would pass 2^40 elements are refused, the product past int64 too",
          "[attention][family]") {
  for (const Family* f : {&find_family("attention_fwd"), &find_family("attention_bwd")}) {
    INFO(f->name());
    // 32768 x 32768 heads of 2^30 rows of 16: 2^64 elements, which int64 arithmetic wraps to 0.
    CHECK_THROWS_WITH(f->check_problem(problem("bf16", std::int64_t{1} << 30, 16, 0, 32768, 32768)),
                      f->name() + ": Q (batch, seq, heads, head_dim) would hold batch * seq * heads * head_dim = "
                                  "32768 * 1073741824 * 32768 * 16 elements (past int64), more than 2^40, the most "
                                  "one tensor may (past any device's memory)");
    CHECK_THROWS_AS(f->make_workload(problem("bf16", std::int64_t{1} << 30, 16, 0, 32768, 32768), 1), Error);
    CHECK_THROWS_WITH(f->check_problem(problem("bf16", std::int64_t{1} << 30, 16, 0, 1, 65)),
                      Catch::Contains("= 1 * 1073741824 * 65 * 16 elements = 1116691496960, more than 2^40"));
    CHECK_NOTHROW(f->check_problem(problem("bf16", std::int64_t{1} << 30, 16, 0, 1, 64)));  // 2^40 exactly
    // K and V: kv_heads <= heads heads, never more than Q's.
    Problem gqa = problem("bf16", std::int64_t{1} << 30, 16, 0, 1, 64);
    gqa.dims["kv_heads"] = 64;
    CHECK_NOTHROW(f->check_problem(gqa));
  }
}

TEST_CASE("attention_fwd space and problem classes", "[attention][family]") {
  const Family& f = forward_family();
  CHECK(f.space().size() == 3 * 5 * 3 * 3 * 2 * 2 * 2 * 3 * 2);
  for (const char* name :
       {"block_m", "block_n", "warps", "stages", "kv_layout", "q_regs", "tile_order", "mma", "pingpong"})
    CHECK_FALSE(f.space().param(name).trades_off.empty());
  // One class per head dim, both dtypes, both masks, ragged lengths.
  std::set<std::int64_t> head_dims, causal;
  std::set<std::string> dtypes;
  for (const auto& p : f.problem_classes()) {
    head_dims.insert(p.dim("head_dim"));
    causal.insert(p.dim("causal"));
    dtypes.insert(p.dtype);
    CHECK(p.dim("seq") % 16 != 0);
    CHECK(p.dim("batch") * p.dim("heads") <= 4);
  }
  CHECK(head_dims == std::set<std::int64_t>{16, 32, 64, 80, 128});
  CHECK(causal == std::set<std::int64_t>{0, 1});
  CHECK(dtypes == std::set<std::string>{"bf16", "f16", "f32"});
}

TEST_CASE("attention_fwd constraints reject configs before compiling, saying why", "[attention][family]") {
  const Family& f = forward_family();
  const auto sm90 = DeviceLimits::for_arch("sm_90");
  CHECK(f.is_valid(config(64, 64, 4, 2), problem("bf16", 1024, 64), sm90));
  CHECK(f.is_valid(config(128, 64, 4, 2), problem("bf16", 1024, 64), sm90));  // two m16 tiles per warp
  CHECK_THAT(why_invalid(config(64, 64, 8, 2), problem("bf16", 1024, 64)),
             Catch::Contains("block_m 64 is not a multiple of 16 x 8 warps"));
  CHECK_THAT(why_invalid(config(128, 32, 2, 2), problem("bf16", 1024, 64)),
             Catch::Contains("each warp would own 64 query rows; at most 32"));
  // Registers: 64-key tiles with two m16 tiles per warp at head_dim 128 would spill; one tile per warp fits.
  CHECK_THAT(why_invalid(config(128, 64, 4, 2), problem("bf16", 1024, 128)), Catch::Contains("it would spill"));
  CHECK(f.is_valid(config(64, 64, 4, 2), problem("bf16", 1024, 128), sm90));
  // Q's fragments re-read from shared memory leave registers for two m16 tiles per warp at head_dim 128.
  CHECK_THAT(why_invalid(config(128, 16, 4, 2, 0, 1), problem("bf16", 1024, 128)), Catch::Contains("it would spill"));
  CHECK(f.is_valid(config(128, 16, 4, 2, 0, 0), problem("bf16", 1024, 128), sm90));
  CHECK_THAT(why_invalid(config(64, 128, 4, 1), problem("bf16", 1024, 128)), Catch::Contains("registers"));
  // Shared memory: (128 + 2 * 3 * 128) padded rows of 88 elements = 154 KB fit an A100's 163 KB, not an
  // RTX 4090's 99 KB; (64 + 2 * 3 * 64) * 136 * 2 = 119 KB likewise.
  CHECK(f.is_valid(config(128, 128, 8, 3), problem("f16", 1024, 80), DeviceLimits::for_arch("sm_80")));
  CHECK_THAT(why_invalid(config(128, 128, 8, 3), problem("f16", 1024, 80), "sm_89"),
             Catch::Contains("needs 157696 bytes of shared memory (the Q tile and 3 stages of K and V tiles)"));
  CHECK(shared_bytes(config(64, 64, 4, 3), problem("f16", 1024, 128)) == (64 + 2 * 3 * 64) * 136 * 2);
  CHECK(f.is_valid(config(64, 64, 4, 3), problem("f16", 1024, 128), DeviceLimits::for_arch("sm_80")));
  CHECK_THAT(why_invalid(config(64, 64, 4, 3), problem("f16", 1024, 128), "sm_89"),
             Catch::Contains("over the 101376 bytes a block of sm_89 may use"));
  // fp32 tiles: twice the bytes, rows padded by 4 floats.
  CHECK(shared_bytes(config(64, 32, 4, 2), problem("f32", 64, 128)) == (64 + 2 * 2 * 32) * 132 * 4);
  // The swizzled layout packs rows: less shared memory than padded rows.
  CHECK(shared_bytes(config(64, 64, 4, 2, 1), problem("bf16", 64, 80)) == (64 + 2 * 2 * 64) * 80 * 2);
  // The wgmma kernel (mma 1): an sm_90 device, 16-bit inputs at head dims 64 and 128, a warpgroup per 64 query
  // rows, key tiles a wgmma's N, its own tile layout (kv_layout 1) and Q read from shared memory (q_regs 0).
  CHECK(f.is_valid(wgmma_forward(128, 128), problem("bf16", 1024, 128), sm90));
  CHECK(f.is_valid(wgmma_forward(64, 16, 3), problem("f16", 1024, 64), DeviceLimits::for_arch("sm_90a")));
  CHECK_THAT(why_invalid(wgmma_forward(128, 128), problem("bf16", 1024, 128), "sm_80"),
             Catch::Contains("needs an sm_90 device"));
  CHECK_THAT(why_invalid(wgmma_forward(128, 64), problem("f32", 1024, 64)), Catch::Contains("16-bit inputs"));
  CHECK_THAT(why_invalid(wgmma_forward(128, 64), problem("bf16", 1024, 80)), Catch::Contains("head dims 64 and 128"));
  CHECK_THAT(why_invalid(with(wgmma_forward(128, 64), {{"warps", 4}}), problem("bf16", 1024, 64)),
             Catch::Contains("block_m is 16 x warps"));
  CHECK_THAT(why_invalid(wgmma_forward(128, 48), problem("bf16", 1024, 64)),
             Catch::Contains("block_n is 16, 32, 64 or 128"));
  CHECK_THAT(why_invalid(with(wgmma_forward(128, 64), {{"kv_layout", 0}}), problem("bf16", 1024, 64)),
             Catch::Contains("kv_layout 1"));
  CHECK_THAT(why_invalid(with(wgmma_forward(128, 64), {{"q_regs", 1}}), problem("bf16", 1024, 64)),
             Catch::Contains("q_regs 0"));
  // Overlapped (mma 2): the next key tile's S beside this tile's P V, so two stages at least.
  CHECK(f.is_valid(wgmma_forward(128, 128, 2, 2), problem("bf16", 1024, 128), sm90));
  CHECK(f.is_valid(wgmma_forward(64, 16, 3, 2), problem("f16", 1024, 64), sm90));
  CHECK_THAT(why_invalid(wgmma_forward(64, 64, 1, 2), problem("bf16", 1024, 64)),
             Catch::Contains("mma 2 (wgmma, overlapped) reads the next key tile beside this one's values: stages 2"));
  CHECK_THAT(why_invalid(wgmma_forward(128, 128, 2, 2), problem("bf16", 1024, 128), "sm_80"),
             Catch::Contains("mma 2: wgmma needs an sm_90 device"));
  // One warpgroup copying 128-key tiles at head_dim 128 (32 chunks a thread) would spill overlapped (ptxas: 304
  // to 384 bytes), not in turn.
  CHECK_THAT(why_invalid(wgmma_forward(64, 128, 2, 2), problem("bf16", 1024, 128)),
             Catch::Contains("mma 2: wgmma: each thread would need about 272 registers"));
  CHECK(f.is_valid(wgmma_forward(64, 128, 2, 1), problem("bf16", 1024, 128), sm90));
  // A device with smaller blocks.
  DeviceLimits small = sm90;
  small.max_threads_per_block = 128;
  std::string why;
  CHECK_FALSE(f.is_valid(config(128, 64, 8, 2), problem("bf16", 64, 64), small, &why));
  CHECK_THAT(why, Catch::Contains("block limit"));
}

TEST_CASE("attention_fwd defaults are valid for every head dim and dtype and fit an sm_80 block",
          "[attention][family]") {
  for (const char* dtype : {"bf16", "f16", "f32"})
    for (const std::int64_t d : kHeadDims)
      for (const std::int64_t seq : {1, 37, 4096, 16384})
        for (const std::int64_t causal : {0, 1}) {
          const Problem p = problem(dtype, seq, d, causal);
          INFO(p.key());
          const Config c = forward_family().default_config(p);
          CHECK_NOTHROW(forward_family().space().check_member(c));
          // On a grid of 264 blocks of 128 rows or more (16384 rows x 6 heads: 768), 16-bit types take
          // 128-row blocks over 4 warps, two m16 tiles per warp, Q re-read from shared memory; above head_dim
          // 80, 48-key tiles in swizzled rows. Else 64 rows, one tile per warp.
          const bool busy = std::string(dtype) != "f32" && seq == 16384;
          CHECK(c.at("block_m") == (busy ? 128 : 64));
          CHECK(c.at("block_m") / (16 * c.at("warps")) == (busy ? 2 : 1));
          CHECK(c.at("q_regs") == (busy ? 0 : 1));
          CHECK(c.at("kv_layout") == (busy && d > 80 ? 1 : 0));
          if (busy && d > 80) CHECK(c.at("block_n") == 48);
          for (const char* arch : {"sm_80", "sm_86", "sm_90"}) {
            std::string why;
            CHECK(forward_family().is_valid(c, p, DeviceLimits::for_arch(arch), &why));
            CHECK(why.empty());
          }
        }
}

TEST_CASE("attention_fwd rendering: tunables, head dim, mask and dtype are template arguments, shapes share a "
          "binary",
          "[attention][family]") {
  const Family& f = forward_family();
  const Rendered r = f.render(config(128, 32, 4, 3, 1), problem("bf16", 70, 80, 1));
  REQUIRE(r.kernels.size() == 1);
  CHECK(r.kernels[0] == "attention::attention_fwd<80, 128, 32, 4, 3, 1, true, true, __nv_bfloat16>");
  CHECK(r.source.find("attention_fwd<80, 128, 32, 4, 3, 1, true, true, __nv_bfloat16>") != std::string::npos);
  CHECK(r.source.find("namespace attention") != std::string::npos);
  CHECK(f.render(config(64, 64, 4, 2), problem("f16", 5, 64, 0)).kernels[0] ==
        "attention::attention_fwd<64, 64, 64, 4, 2, 0, true, false, __half>");
  CHECK(f.render(config(64, 32, 4, 2, 0, 0), problem("f32", 5, 64, 0)).kernels[0] ==
        "attention::attention_fwd<64, 64, 32, 4, 2, 0, false, false, float>");
  // Batch, heads and seq are kernel arguments: one binary serves them all.
  CHECK(f.render(config(64, 64, 4, 2), problem("f16", 5, 64, 0, 1, 1)).source ==
        f.render(config(64, 64, 4, 2), problem("f16", 4099, 64, 0, 8, 12)).source);
  CHECK_FALSE(r.arch_specific);
  // The wgmma kernel: warpgroups, not warps, are its argument; compiled for sm_90a where the device is sm_90.
  const Rendered w = f.render(wgmma_forward(128, 64, 3), problem("bf16", 70, 128, 1));
  REQUIRE(w.kernels.size() == 1);
  CHECK(w.kernels[0] == "attention::attention_fwd_wgmma<128, 128, 64, 2, 3, false, false, true, __nv_bfloat16>");
  CHECK(w.source.find("wgmma.mma_async") != std::string::npos);
  CHECK(w.arch_specific);
  // Overlapped, and the warpgroups taking turns: the same kernel, its schedule template arguments.
  const Rendered o = f.render(wgmma_forward(128, 64, 3, 2), problem("bf16", 70, 128, 1));
  CHECK(o.kernels[0] == "attention::attention_fwd_wgmma<128, 128, 64, 2, 3, true, false, true, __nv_bfloat16>");
  CHECK(f.render(wgmma_forward(128, 64, 3, 1, 1), problem("bf16", 70, 128, 1)).kernels[0] ==
        "attention::attention_fwd_wgmma<128, 128, 64, 2, 3, false, true, true, __nv_bfloat16>");
  CHECK(o.arch_specific);
}

TEST_CASE("attention_fwd plan: grid over query blocks, heads and batch, dynamic shared memory, checked arguments",
          "[attention][family]") {
  const auto& f = forward_family();
  const auto sm90 = DeviceLimits::for_arch("sm_90");
  const Problem p = problem("bf16", 130, 128, 1, 2, 3);
  const Config c = config(64, 64, 4, 2);
  const std::vector<std::uint64_t> addresses = {0x10000, 0x20000, 0x30000, 0x40000, 0x50000};
  const Family& untyped = f;  // the workload-driven plan that the runners call
  auto launches = untyped.plan(c, p, addresses, sm90);
  REQUIRE(launches.size() == 1);
  const Launch& l = launches[0];
  CHECK(l.kernel == 0);
  CHECK(l.grid == std::array<unsigned, 3>{3, 3, 2});  // ceil(130 / 64) query blocks, heads, batch
  CHECK(l.block == std::array<unsigned, 3>{128, 1, 1});
  CHECK(l.dynamic_smem == (64 + 2 * 2 * 64) * 136 * 2);
  CHECK(l.dynamic_smem > 48 * 1024);  // the runner opts in
  CHECK(l.args.count() == 14);  // q, k, v, o, lse, four strides, seq, heads, kv_group, scale, tile order

  // The workload's buffers in the model's layout, at the default scale.
  const ForwardArgs a = f.args_of(p, addresses);
  CHECK(a.q == 0x10000);
  CHECK(a.lse == 0x50000);
  CHECK(a.q_strides == TensorStrides{.batch = 130 * 3 * 128, .head = 128, .seq = 3 * 128});
  CHECK(a.o_strides == a.q_strides);
  CHECK(a.scale == 1.0f / std::sqrt(128.0f));
  CHECK_THROWS_WITH(f.args_of(p, {1, 2, 3}), Catch::Contains("expects the addresses of q, k, v, o, lse; got 3"));

  // Any strides that keep rows 16-byte aligned, any positive scale.
  ForwardArgs bhsd = a;
  bhsd.q_strides = bhsd.k_strides = bhsd_strides(shape_of(p));
  bhsd.scale = 0.5f;
  CHECK(f.plan(c, p, bhsd, sm90).size() == 1);
  ForwardArgs bad = a;
  bad.k_strides.seq = 3 * 128 + 4;
  CHECK_THROWS_WITH(f.plan(c, p, bad, sm90), Catch::Contains("strides of 'k' (batch 49920, head 128, seq 388) "
                                                             "must be non-negative multiples of 8"));
  // fp32 rows are 4-float chunks.
  ForwardArgs f32_args = f.args_of(problem("f32", 130, 128, 1, 2, 3), addresses);
  f32_args.k_strides.seq = 3 * 128 + 4;
  CHECK(f.plan(config(64, 16, 4, 2), problem("f32", 130, 128, 1, 2, 3), f32_args, sm90).size() == 1);
  f32_args.k_strides.seq = 3 * 128 + 2;
  CHECK_THROWS_WITH(f.plan(config(64, 16, 4, 2), problem("f32", 130, 128, 1, 2, 3), f32_args, sm90),
                    Catch::Contains("multiples of 4 elements"));
  bad = a;
  bad.v = 0x30008;
  CHECK_THROWS_WITH(f.plan(c, p, bad, sm90), Catch::Contains("buffer 'v' at 0x30008 is not aligned to 16 bytes"));
  bad = a;
  bad.scale = 0;
  CHECK_THROWS_WITH(f.plan(c, p, bad, sm90), Catch::Contains("scale must be positive and finite, got 0"));
}

TEST_CASE("attention_fwd workloads: fresh 16-bit inputs per seed, the streaming reference's O and lse",
          "[attention][family]") {
  const Family& f = forward_family();
  const Problem p = problem("f16", 9, 16, 1, 1, 2);
  const Workload w = f.make_workload(p, 3);
  REQUIRE(w.buffers.size() == 5);
  const std::size_t n = 9 * 2 * 16;
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(w.buffers[i].role == Role::kInput);
    CHECK(w.buffers[i].dtype == DType::kF16);
    CHECK(w.buffers[i].elements() == n);
  }
  CHECK(w.buffers[3].name == "o");
  CHECK(w.buffers[3].role == Role::kOutput);
  CHECK(w.buffers[3].tolerance == tolerance_for("f16"));
  CHECK(w.buffers[4].name == "lse");
  CHECK(w.buffers[4].dtype == DType::kF32);
  CHECK(w.buffers[4].elements() == 2 * 9);
  CHECK(w.buffers[4].tolerance == tolerance_for("f32"));
  CHECK(f.make_workload(p, 4).buffers[0].bytes != w.buffers[0].bytes);

  // Causal: query 0 of each head sees key 0 only, so O's row 0 is V's row 0
  // and its lse is scale * q_0.k_0.
  auto at = [](const HostBuffer& b, const std::vector<std::byte>& bytes, std::size_t i) {
    return value_at(b.dtype, bytes, i);
  };
  for (std::size_t d = 0; d < 16; ++d)
    CHECK(at(w.buffers[3], w.buffers[3].expected, d) == at(w.buffers[2], w.buffers[2].bytes, d));
  double dot = 0;
  for (std::size_t d = 0; d < 16; ++d)
    dot += at(w.buffers[0], w.buffers[0].bytes, d) * at(w.buffers[1], w.buffers[1].bytes, d);
  CHECK(at(w.buffers[4], w.buffers[4].expected, 0) == Approx(dot / 4).epsilon(1e-6));

  // f32 problems: fp32 buffers, O and lse checked at tf32's tolerance.
  const Workload w32 = f.make_workload(problem("f32", 9, 16, 0, 1, 2), 3);
  CHECK(w32.buffers[0].dtype == DType::kF32);
  CHECK(w32.buffers[3].dtype == DType::kF32);
  CHECK(w32.buffers[3].tolerance == tolerance_for("tf32"));
  CHECK(w32.buffers[4].tolerance == tolerance_for("tf32"));

  CHECK(f.flops(problem("bf16", 128, 64, 0, 2, 3)) == 4.0 * 2 * 3 * 128 * 128 * 64);
  CHECK(f.flops(problem("bf16", 128, 64, 1, 2, 3)) == 2.0 * 2 * 3 * 128 * 128 * 64);
  CHECK(f.bytes(problem("bf16", 128, 64, 1, 2, 3)) == 4.0 * 2 * (2 * 3 * 128 * 64) + 4.0 * 2 * 3 * 128);
  CHECK(f.bytes(problem("f32", 128, 64, 1, 2, 3)) == 4.0 * 4 * (2 * 3 * 128 * 64) + 4.0 * 2 * 3 * 128);

  // Grouped-query attention: K and V have kv_heads heads, in the model's layout.
  Problem gqa = problem("bf16", 9, 16, 1, 2, 6);
  gqa.dims["kv_heads"] = 2;
  const Workload wg = f.make_workload(gqa, 3);
  CHECK(wg.buffers[0].elements() == 2 * 9 * 6 * 16);
  CHECK(wg.buffers[1].elements() == 2 * 9 * 2 * 16);
  CHECK(wg.buffers[2].elements() == 2 * 9 * 2 * 16);
  CHECK(wg.buffers[3].elements() == 2 * 9 * 6 * 16);
  const ForwardArgs ga = forward_family().args_of(gqa, {0, 16, 32, 48, 64});
  CHECK(ga.k_strides == TensorStrides{.batch = 9 * 2 * 16, .head = 16, .seq = 2 * 16});
  CHECK(ga.q_strides == TensorStrides{.batch = 9 * 6 * 16, .head = 16, .seq = 6 * 16});
  CHECK(f.bytes(gqa) == 2.0 * 2 * (2 * 9 * 6 + 2 * 9 * 2) * 16 + 4.0 * 2 * 6 * 9);
}

TEST_CASE("attention_fwd's lse passes an RMS error of three tolerances of the scores' spread at seq 1, where lse "
          "is the score: a score's tf32 error passes, an lse 1 % of the spread off fails",
          "[attention][family]") {
  const Family& f = forward_family();
  const auto rms = [](const HostBuffer& b, const std::vector<std::byte>& bytes) {
    double sum = 0;
    for (std::size_t i = 0; i < b.elements(); ++i) sum += value_at(b.dtype, bytes, i) * value_at(b.dtype, bytes, i);
    return std::sqrt(sum / static_cast<double>(b.elements()));
  };
  // lse moved by `by` at every row.
  const auto moved = [](const HostBuffer& lse, double by) {
    std::vector<float> values(lse.elements());
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = static_cast<float>(value_at(DType::kF32, lse.expected, i) + by);
    return make_buffer("lse", Role::kOutput, DType::kF32, values).bytes;
  };
  for (const std::uint64_t seed : {1, 2, 3, 4, 5}) {
    const Problem p = problem("f32", 1, 32, 1, 1, 1);
    const Workload w = f.make_workload(p, seed);
    const HostBuffer& lse = w.buffers[4];
    const double sigma = default_scale(32) * std::sqrt(32.0) * rms(w.buffers[0], w.buffers[0].bytes) *
                         rms(w.buffers[1], w.buffers[1].bytes);
    INFO("seed " << seed << " lse " << value_at(DType::kF32, lse.expected, 0) << " sigma " << sigma);
    CHECK(lse.atol == Approx(3 * tolerance_for("tf32") * sigma));
    // Twice a score's RMS error from tf32's rounding of q and k, sqrt(2/3) 2^-11 sigma, passes; 1 % of sigma fails.
    const double tf32_error = std::sqrt(2.0 / 3.0) * std::ldexp(1.0, -11) * sigma;
    for (const double sign : {1.0, -1.0}) {
      const auto near = moved(lse, sign * 2 * tf32_error), off = moved(lse, sign * 1e-2 * sigma);
      CHECK(within_tolerance(lse, near, relative_l2(DType::kF32, near, lse.expected)));
      CHECK_FALSE(within_tolerance(lse, off, relative_l2(DType::kF32, off, lse.expected)));
    }
  }
  // Longer rows add log(keys) to lse while sum_j P_ij^2 falls: there the atol is within what the relative check
  // passes already.
  for (const char* dtype : {"f32", "bf16"})
    for (const std::int64_t causal : {0, 1}) {
      const Workload w = f.make_workload(problem(dtype, 129, 64, causal, 1, 2), 3);
      const HostBuffer& lse = w.buffers[4];
      INFO(dtype << " causal " << causal << " atol " << lse.atol << " RMS " << rms(lse, lse.expected));
      CHECK(lse.atol <= lse.tolerance * rms(lse, lse.expected));
    }
}

TEST_CASE("fp32 to fp16 rounds to nearest even, keeps subnormals and overflows to infinity", "[attention][family]") {
  for (const std::uint16_t bits : {0x0000, 0x0001, 0x03ff, 0x0400, 0x3c00, 0x3555, 0x7bff, 0x8001, 0xc000, 0x7c00})
    CHECK(float_to_f16_bits(f16_bits_to_float(bits)) == bits);
  CHECK(float_to_f16_bits(1.0f + 1.0f / 2048) == 0x3c00);           // halfway: ties to even (1.0)
  CHECK(float_to_f16_bits(1.0f + 3.0f / 2048) == 0x3c02);           // halfway: ties to even (1 + 2^-9)
  CHECK(float_to_f16_bits(std::ldexp(1.5f, -24)) == 0x0002);        // subnormal halfway, to even
  CHECK(float_to_f16_bits(65519.0f) == 0x7bff);
  CHECK(float_to_f16_bits(65520.0f) == 0x7c00);
  CHECK(float_to_f16_bits(-1e9f) == 0xfc00);
  CHECK(std::isnan(f16_bits_to_float(float_to_f16_bits(std::nanf("")))));
}

TEST_CASE("attention_fwd: copies that walk one pointer hold no registers, which admits two m16 tiles per warp at "
          "head_dim 128",
          "[attention][family][compile]") {
  // 128 threads over rows of 16 chunks (bf16, head_dim 128): 8 rows a step, a whole swizzle period; rows of 10
  // chunks (head_dim 80) do not divide the threads, and 64 rows of them hold 3/2 of the 5 copies' addresses.
  CHECK(copy_registers(128, problem("bf16", 1024, 128), true, 128) == 0);
  CHECK(copy_registers(32, problem("bf16", 1024, 128), true, 128) == 0);
  CHECK(copy_registers(64, problem("bf16", 1024, 80), false, 128) == 3 * 5 / 2);
  CHECK(copy_registers(16, problem("f32", 1024, 128), true, 64) == 3 * 8 / 2);  // 2 rows a step, swizzle period 8
  CHECK(copy_registers(16, problem("f32", 1024, 128), false, 64) == 0);         // padded: no period
  // FlashAttention-2's forward shape at head_dim 128: 128 rows over 4 warps (two m16 tiles each), 32-key tiles,
  // Q re-read from shared memory; admitted, and no spill.
  const auto& f = forward_family();
  const tuner::Compiler compiler;
  const Problem p = problem("bf16", 16384, 128, 1, 1, 16);
  const Config c = config(128, 32, 4, 2, 1, 0);
  for (const char* arch : {"sm_80", "sm_90"}) {
    INFO(c.str() << " " << arch);
    REQUIRE(f.is_valid(c, p, DeviceLimits::for_arch(arch)));
    test::check_compiles_without_spill(compiler, f, c, p, arch);
  }
}

TEST_CASE("attention_fwd: 48-key tiles with two m16 tiles per warp at head_dim 128 are admitted where ptxas fits "
          "them, rejected where it spills",
          "[attention][family][compile]") {
  // Each K and V fragment read from shared memory feeds two mmas, as in FlashAttention-2's forward, with a third
  // more keys per tile than 32-key tiles. ptxas fits them in 252 registers in swizzled rows at 2 or 3 stages;
  // padded rows spill 4 to 20 bytes at sm_90, one stage 104, and at head_dim 80 with Q in registers swizzled rows
  // (over pairs of chunks) 24.
  const auto& f = forward_family();
  const tuner::Compiler compiler;
  const Problem p = problem("bf16", 16384, 128, 1, 1, 16);
  for (const std::int64_t stages : {2, 3}) {
    const Config c = config(128, 48, 4, stages, 1, 0);
    for (const char* arch : {"sm_80", "sm_90"}) {
      INFO(c.str() << " " << arch);
      REQUIRE(f.is_valid(c, p, DeviceLimits::for_arch(arch)));
      test::check_compiles_without_spill(compiler, f, c, p, arch);
    }
    CHECK_THAT(why_invalid(config(128, 48, 4, stages, 0, 0), p), Catch::Contains("it would spill"));
    CHECK_THAT(why_invalid(config(128, 48, 4, stages, 1, 1), problem("bf16", 16384, 80, 1, 1, 32)),
               Catch::Contains("it would spill"));
  }
  CHECK_THAT(why_invalid(config(128, 48, 4, 1, 1, 0), p), Catch::Contains("it would spill"));
}

TEST_CASE("attention candidates are points of the space, other than the default, valid at the targets' shapes",
          "[attention][family]") {
  const Family& forward = forward_family();
  const Family& backward = backward_family();
  for (const Family* f : {&forward, &backward})
    for (const Problem& p : f->problem_classes())
      for (const Config& c : f->candidates(p)) {
        INFO(f->name() << " " << p.key() << " " << c.str());
        CHECK_NOTHROW(f->space().check_member(c));
      }
  const auto sm90 = DeviceLimits::for_arch("sm_90");
  // The causal forward at head_dim 128: the default with the longest tiles of every head first, the wgmma
  // kernel over two warpgroups with 128- and 64-key tiles, in turn and overlapped, each with and without
  // ping-pong, the longest tiles first too (valid on sm_90 alone), two
  // m16 tiles per warp with 32-key tiles, and one tile over 8 warps with 64-key tiles; the default (two tiles,
  // 48 keys) not again; at head_dim 64 the first nine; at head_dim 80 no wgmma; for f32 only the first.
  const Problem d128 = problem("bf16", 16384, 128, 1, 1, 16);
  const auto first = [](const Config& c) { return with(c, {{"tile_order", 1}}); };
  const auto fwd = forward_family().candidates(d128);
  REQUIRE(fwd.size() == 11);
  CHECK(fwd[0] == with(forward_family().default_config(d128), {{"tile_order", 1}}));
  CHECK(fwd[1] == first(wgmma_forward(128, 128)));
  CHECK(fwd[2] == first(wgmma_forward(128, 128, 2, 1, 1)));
  CHECK(fwd[3] == first(wgmma_forward(128, 128, 2, 2)));
  CHECK(fwd[4] == first(wgmma_forward(128, 128, 2, 2, 1)));
  CHECK(fwd[5] == first(wgmma_forward(128, 64)));
  CHECK(fwd[8] == first(wgmma_forward(128, 64, 2, 2, 1)));
  CHECK(fwd[9].at("block_n") == 32);
  CHECK(fwd[10].at("warps") == 8);
  for (const Config& c : fwd) {
    INFO(c.str());
    CHECK(forward_family().is_valid(c, d128, sm90));
    CHECK(c != forward_family().default_config(d128));
  }
  CHECK_FALSE(forward_family().is_valid(fwd[1], d128, DeviceLimits::for_arch("sm_80")));
  CHECK(forward_family().candidates(problem("bf16", 16384, 80, 1, 1, 16)).size() == 4);
  const auto d64 = forward_family().candidates(problem("bf16", 16384, 64, 1, 1, 16));
  REQUIRE(d64.size() == 9);
  for (std::size_t i = 1; i < 9; ++i)
    CHECK(d64[i] == first(wgmma_forward(128, i < 5 ? 128 : 64, 2, 1 + (i - 1) % 4 / 2, (i - 1) % 2)));
  CHECK(forward_family().candidates(problem("f32", 16384, 128, 1, 1, 16)).size() == 1);
  CHECK(forward_family().candidates(problem("f32", 16384, 128, 0, 1, 16)).empty());
  // Without a causal mask every tile has the same work: no tile order 1, and no such candidate.
  const Problem full = problem("bf16", 16384, 128, 0, 1, 16);
  std::string why;
  CHECK_FALSE(forward.is_valid(with(forward.default_config(full), {{"tile_order", 1}}), full, sm90, &why));
  CHECK_THAT(why, Catch::Contains("without a causal mask every tile has the same"));
  for (const Config& c : forward.candidates(full)) CHECK(c.at("tile_order") == 0);
  // The leaderboard backward, whose default is FlashAttention-2's partition at 64-query tiles: the wgmma pass
  // (valid on sm_90 alone) with the longest blocks of every head first, over 128 keys at 128-query tiles in
  // turn (sm_90's default shape) and overlapped, each with and without ping-pong, overlapped with dQ by bulk
  // reductions and in turn with them; at 64-query tiles overlapped with and without ping-pong, with bulk
  // reductions, in turn; in turn over 64 keys; the default with the longest blocks first, at 4 stages, the
  // partition at 128-query tiles and the previous default (16-query tiles over 4 warps of two key tiles each);
  // at head_dim 128 no 128-query tiles.
  const Problem leaderboard = problem("bf16", 16384, 64, 1, 1, 16);
  const auto bwd = backward_family().candidates(leaderboard);
  REQUIRE(bwd.size() == 15);
  for (const Config& c : bwd) {
    INFO(c.str());
    CHECK(backward_family().is_valid(c, leaderboard, sm90));
    CHECK(c != backward_family().default_config(leaderboard));
  }
  CHECK(bwd[0] == wgmma_backward(128, 128, 2, 1, 1, 1));
  CHECK(bwd[1] == wgmma_backward(128, 128, 2, 1, 1, 1, 1));
  CHECK(bwd[2] == wgmma_backward(128, 128, 2, 2, 1, 1));
  CHECK(bwd[3] == wgmma_backward(128, 128, 2, 2, 1, 1, 1));
  CHECK(bwd[4] == wgmma_backward(128, 128, 2, 2, 2, 1));
  CHECK(bwd[5] == wgmma_backward(128, 128, 2, 1, 2, 1));
  CHECK(bwd[6] == wgmma_backward(64, 128, 2, 2, 1, 1));
  CHECK(bwd[7] == wgmma_backward(64, 128, 2, 2, 1, 1, 1));
  CHECK(bwd[8] == wgmma_backward(64, 128, 2, 2, 2, 1));
  CHECK(bwd[9] == wgmma_backward(64, 128, 2, 1, 1, 1));
  CHECK(bwd[10] == wgmma_backward(64, 64, 2, 1, 1, 1));
  CHECK_FALSE(backward_family().is_valid(bwd[0], leaderboard, DeviceLimits::for_arch("sm_80")));
  CHECK(bwd[11] == with(backward_family().default_config(leaderboard), {{"tile_order", 1}}));
  CHECK(bwd[12].at("stages") == 4);
  CHECK(bwd[13].at("block_m") == 128);
  CHECK(bwd[14].at("block_m") == 16);
  const auto bwd128 = backward_family().candidates(d128);
  REQUIRE(bwd128.size() >= 5);  // the five wgmma ones at 64-query tiles
  CHECK(bwd128[0] == wgmma_backward(64, 128, 2, 2, 1, 1));
  CHECK(bwd128[1] == wgmma_backward(64, 128, 2, 2, 1, 1, 1));
  CHECK(bwd128[2] == wgmma_backward(64, 128, 2, 2, 2, 1));
  CHECK(bwd128[3] == wgmma_backward(64, 128, 2, 1, 1, 1));
  CHECK(bwd128[4] == wgmma_backward(64, 64, 2, 1, 1, 1));
  // Without a causal mask, no candidate orders the blocks.
  for (const Config& c : backward_family().candidates(problem("bf16", 16384, 64, 0, 1, 16)))
    CHECK(c.at("tile_order") == 0);
  for (std::size_t i = 0; i < 4; ++i) CHECK(backward_family().is_valid(bwd128[i], d128, sm90));
}

TEST_CASE("attention defaults at the benchmarks' shapes compile for sm_80 and sm_90 without spilling, and the "
          "wgmma candidates for sm_90a",
          "[attention][family][compile]") {
  // The CS336 leaderboard case, head_dim 128 at seq 16384 (the causal
  // forward target), the 2.7B model's head_dim 80; for the forward also
  // seed 003's head dims 16 and 32 at seq 16384.
  const tuner::Compiler compiler;
  const std::vector<Problem> both = {problem("bf16", 16384, 64, 1, 1, 16), problem("bf16", 16384, 128, 1, 1, 16),
                                     problem("bf16", 16384, 80, 1, 1, 32)};
  std::vector<Problem> forward = both;
  forward.push_back(problem("f16", 16384, 32, 0, 8, 1));
  forward.push_back(problem("bf16", 16384, 16, 0, 8, 1));
  // A wgmma config for sm_90a: no spill, and ptxas keeps the products asynchronous (no wait of its own, C7517;
  // nothing serialised).
  auto check_wgmma = [&](const Family& f, const Config& c, const Problem& p) {
    test::check_compiles_without_spill(compiler, f, c, p, "sm_90");
    const auto r = compiler.compile(f.render(c, p), "sm_90");  // from the cache
    CHECK(r.arch == "sm_90a");
    INFO(r.log);
    CHECK(r.log.find("C7517") == std::string::npos);
    CHECK(r.log.find("serialized") == std::string::npos);
  };
  // The default on each arch: on sm_90 the wgmma kernels where the families have them as arch_default.
  std::size_t wgmma_defaults = 0;
  for (const auto& [f, problems] : {std::pair<const Family*, std::vector<Problem>>{&forward_family(), forward},
                                    {&backward_family(), both}})
    for (const Problem& p : problems)
      for (const char* arch : {"sm_80", "sm_90"}) {
        const Config c = tuner::default_on(*f, p, DeviceLimits::for_arch(arch));
        if (c.at("mma") == 0) {
          test::check_compiles_without_spill(compiler, *f, c, p, arch);
        } else {
          ++wgmma_defaults;
          check_wgmma(*f, c, p);
        }
      }
  CHECK(wgmma_defaults == 3);  // the forward at head dims 64 and 128, the backward at 64
  // Both families' wgmma candidates (for sm_90a) at the leaderboard's shape and head_dim 128.
  for (const Family* f : std::initializer_list<const Family*>{&forward_family(), &backward_family()})
    for (const Problem& p : {both[0], both[1]})
      for (const Config& c : f->candidates(p))
        if (c.at("mma") != 0) check_wgmma(*f, c, p);
}

}  // namespace templates_attention_family_test
