// Attention forward kernels run by the host emulation backend against the
// streaming CPU reference: every problem class with its default and a seeded
// sample of configs; sequence lengths 1, 17, 64 and 129, causal and not, in
// the (batch, seq, heads, head_dim) layout, the (batch, heads, seq,
// head_dim) layout and rows strided as in a fused QKV buffer, with padding
// the kernel must never read and never write; other scales; and the
// pipeline and layout variants (one to three stages, padded and swizzled
// tiles, one and two m16 tiles per warp, 16- to 128-key tiles, Q's fragments
// kept in registers or re-read from shared memory); f32 inputs
// on the tf32 path; grouped- and multi-query attention; the family's own
// check at seq 1 and at scales past the default, and a broken kernel it
// still fails; the wgmma kernel in turn (mma 1) and overlapped (mma 2) over
// its shapes, and broken on purpose.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>

#include "templates/attention/attention.hpp"
#include "templates/attention/shapes.hpp"
#include "templates/common/family_helpers.hpp"
#include "templates/emulated_plan.hpp"
#include "templates/render.hpp"
#include "templates/sampled_configs.hpp"
#include "tuner/emu_launch.hpp"

namespace templates_attention_family_emu_test {

using namespace ktune;
using namespace ktune::templates;
using namespace ktune::templates::attention;
using test::attention::problem;
using test::attention::wgmma_forward;

namespace {

Config config(std::int64_t block_m, std::int64_t block_n, std::int64_t warps, std::int64_t stages,
              std::int64_t kv_layout, std::int64_t q_regs = 1) {
  return Config({{"block_m", block_m}, {"block_n", block_n}, {"warps", warps}, {"stages", stages},
                 {"kv_layout", kv_layout}, {"q_regs", q_regs}, {"tile_order", 0}, {"mma", 0},
                 {"pingpong", 0}});
}

/// How q, k, v and o lie in memory.
enum class Layout { kBSHD, kBHSD, kFusedQKV };
const char* to_string(Layout l) {
  return l == Layout::kBSHD ? "(batch, seq, heads, head_dim)"
         : l == Layout::kBHSD ? "(batch, heads, seq, head_dim)"
                              : "fused QKV rows, (batch, heads, seq, head_dim) output";
}

/// Heads of tensor i of q, k, v, o: K and V have kv_heads.
std::int64_t heads_of(int i, const AttentionShape& s) { return i == 1 || i == 2 ? s.kv_heads : s.heads; }

/// Strides of q, k, v (index 0-2) and o (3) for a layout. The fused layout
/// strides rows as a (batch, seq, heads + 2 kv_heads, head_dim) buffer
/// would, leaving the other tensors' rows between a tensor's rows: padding here.
std::array<TensorStrides, 4> strides_for(Layout l, const AttentionShape& s) {
  AttentionShape kv = s;
  kv.heads = s.kv_heads;
  if (l == Layout::kBSHD) return {bshd_strides(s), bshd_strides(kv), bshd_strides(kv), bshd_strides(s)};
  if (l == Layout::kBHSD) return {bhsd_strides(s), bhsd_strides(kv), bhsd_strides(kv), bhsd_strides(s)};
  const std::int64_t row = (s.heads + 2 * s.kv_heads) * s.head_dim;
  const TensorStrides fused{.batch = s.seq * row, .head = s.head_dim, .seq = row};
  return {fused, fused, fused, bhsd_strides(s)};
}

/// Element offset of row (b, h, i) of a tensor with strides `st`.
std::int64_t row_at(const TensorStrides& st, std::int64_t b, std::int64_t h, std::int64_t i) {
  return b * st.batch + h * st.head + i * st.seq;
}
/// Elements a tensor with strides `st` and `heads` heads spans.
std::size_t extent(const TensorStrides& st, const AttentionShape& s, std::int64_t heads) {
  return static_cast<std::size_t>(row_at(st, s.batch - 1, heads - 1, s.seq - 1) + s.head_dim);
}

struct Errors {
  double o = INFINITY, lse = INFINITY;
  bool padding_kept = false;  ///< o's elements outside the tensor were left as they were
};

/// Runs `c` emulated on fresh inputs laid out as `layout` (elements outside
/// the tensors hold NaN: reading one poisons O), with softmax scale `scale`
/// (the default when 0), and returns the relative L2 errors of O and lse
/// against the streaming reference in fp64. `source`, when given, replaces
/// the family's rendering of `c`.
Errors run_layout(const Config& c, const Problem& p, Layout layout, float scale = 0, std::uint64_t seed = 5,
                  const Rendered* source = nullptr) {
  const auto& f = forward_family();
  INFO(p.key() << " " << c.str() << " " << to_string(layout));
  std::string why;
  REQUIRE(f.is_valid(c, p, tuner::EmuRunner().device(), &why));
  const AttentionShape s = shape_of(p);
  const auto st = strides_for(layout, s);
  const DType t = parse_dtype(p.dtype);
  const std::size_t size = size_of(t);
  // Stores `v` as element e of `base` in the problem's dtype; returns the value stored.
  auto put = [&](std::byte* base, std::size_t e, float v) -> double {
    if (t == DType::kF32) {
      std::memcpy(base + 4 * e, &v, 4);
      return v;
    }
    const std::uint16_t bits = t == DType::kBF16 ? float_to_bf16_bits(v) : float_to_f16_bits(v);
    std::memcpy(base + 2 * e, &bits, 2);
    return value_at(t, std::vector<std::byte>(base + 2 * e, base + 2 * e + 2), 0);
  };
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> qk(-2.f, 2.f), uv(-1.f, 1.f);

  std::vector<std::unique_ptr<tuner::emu::GuardedBuffer>> buffers;
  std::vector<std::vector<double>> exact;  // q, k, v as the kernel reads them, at the same offsets
  for (int i = 0; i < 4; ++i) {
    const std::size_t n = extent(st[static_cast<std::size_t>(i)], s, heads_of(i, s));
    auto& b = buffers.emplace_back(std::make_unique<tuner::emu::GuardedBuffer>(std::string(1, "qkvo"[i]), size * n));
    b->fill(0xff);  // NaN in every float type
    if (i == 3) break;
    auto& x = exact.emplace_back(n, NAN);
    for (std::int64_t bb = 0; bb < s.batch; ++bb)
      for (std::int64_t h = 0; h < heads_of(i, s); ++h)
        for (std::int64_t r = 0; r < s.seq; ++r)
          for (std::int64_t d = 0; d < s.head_dim; ++d) {
            const auto e = static_cast<std::size_t>(row_at(st[static_cast<std::size_t>(i)], bb, h, r) + d);
            x[e] = put(b->data(), e, i == 2 ? uv(rng) : qk(rng));
          }
  }
  const auto rows = static_cast<std::size_t>(s.batch * s.heads * s.seq);
  auto& lse_buffer = buffers.emplace_back(std::make_unique<tuner::emu::GuardedBuffer>("lse", 4 * rows));
  lse_buffer->fill(0xff);

  ForwardArgs a;
  a.q = reinterpret_cast<std::uint64_t>(buffers[0]->data());
  a.k = reinterpret_cast<std::uint64_t>(buffers[1]->data());
  a.v = reinterpret_cast<std::uint64_t>(buffers[2]->data());
  a.o = reinterpret_cast<std::uint64_t>(buffers[3]->data());
  a.lse = reinterpret_cast<std::uint64_t>(lse_buffer->data());
  a.q_strides = st[0], a.k_strides = st[1], a.v_strides = st[2], a.o_strides = st[3];
  a.scale = scale > 0 ? scale : default_scale(s.head_dim);
  const auto module = tuner::emu::load_module(source ? *source : f.render(c, p));
  auto launches = f.plan(c, p, a, tuner::EmuRunner().device());
  test::run_emulated(*module, launches, buffers, 2);
  for (const auto& b : buffers) CHECK(b->check_canary().empty());

  std::vector<double> o_expected(extent(st[3], s, s.heads), NAN), lse_expected(rows);
  attention_forward_streaming<double>(exact[0].data(), exact[1].data(), exact[2].data(), o_expected.data(),
                                      lse_expected.data(), s, st[0], st[1], st[2], st[3], a.scale, 0,
                                      s.batch * s.heads);
  // O's elements in the tensor, in order; everything else must still be all ones.
  std::vector<std::byte> o_got, o_want(size * static_cast<std::size_t>(s.batch * s.heads * s.seq * s.head_dim));
  std::vector<bool> inside(o_expected.size(), false);
  const std::byte* o_bytes = buffers[3]->data();
  std::size_t j = 0;
  for (std::int64_t bb = 0; bb < s.batch; ++bb)
    for (std::int64_t h = 0; h < s.heads; ++h)
      for (std::int64_t r = 0; r < s.seq; ++r)
        for (std::int64_t d = 0; d < s.head_dim; ++d) {
          const auto e = static_cast<std::size_t>(row_at(st[3], bb, h, r) + d);
          inside[e] = true;
          o_got.insert(o_got.end(), o_bytes + size * e, o_bytes + size * (e + 1));
          put(o_want.data(), j++, static_cast<float>(o_expected[e]));
        }
  Errors errors;
  errors.padding_kept = true;
  for (std::size_t e = 0; e < inside.size(); ++e)
    for (std::size_t i = 0; i < size; ++i)
      if (!inside[e] && o_bytes[size * e + i] != std::byte{0xff}) errors.padding_kept = false;
  errors.o = relative_l2(t, o_got, o_want);
  std::vector<float> lse_want(lse_expected.begin(), lse_expected.end());
  std::vector<std::byte> lse_got(lse_buffer->data(), lse_buffer->data() + 4 * rows);
  errors.lse = relative_l2(DType::kF32, lse_got, make_buffer("lse", Role::kOutput, DType::kF32, lse_want).bytes);
  return errors;
}

void check_layout(const Config& c, const Problem& p, Layout layout, float scale = 0) {
  INFO(p.key() << " " << c.str() << " " << to_string(layout) << " scale " << scale);
  const Errors e = run_layout(c, p, layout, scale);
  // f32 inputs multiply in tf32: O and lse carry tf32's rounding of q, k, v and P.
  const bool tf32 = p.dtype == "f32";
  CHECK(e.o < tolerance_for(tf32 ? "tf32" : p.dtype));
  CHECK(e.lse < tolerance_for(tf32 ? "tf32" : "f32"));
  CHECK(e.padding_kept);
}

}  // namespace

TEST_CASE("attention_fwd: every problem class, default and a seeded sample of configs, matches the reference",
          "[attention][emu]") {
  const auto& f = forward_family();
  tuner::EmuRunner runner;
  for (const auto& p : f.problem_classes())
    for (const auto& c : test::sampled_configs(f, p, runner.device(), 3)) {
      INFO(p.key() << " " << c.str());
      tuner::RunOptions options;
      options.seed = 21;
      const auto r = runner.run(f, c, p, options);
      INFO(r.failure);
      CHECK(r.ok);
      REQUIRE(r.errors.size() == 2);
      for (const auto& [name, error] : r.errors) {
        INFO(name << " error " << error);
        const bool tf32 = p.dtype == "f32";
        CHECK(error < tolerance_for(tf32 ? "tf32" : name == "lse" ? "f32" : p.dtype));
      }
    }
}

TEST_CASE("attention_fwd: sequences of 1, 17, 64 and 129, causal and not, in three layouts", "[attention][emu]") {
  const Config c = forward_family().default_config(problem("bf16", 64, 64, true));
  for (const bool causal : {false, true})
    for (const std::int64_t seq : {1, 17, 64, 129})
      for (const Layout layout : {Layout::kBSHD, Layout::kBHSD, Layout::kFusedQKV})
        check_layout(c, problem("bf16", seq, 64, causal), layout);
}

TEST_CASE("attention_fwd: the longest tiles of every head first, over several heads, batches and grouped heads",
          "[attention][emu]") {
  // tile_order 1 maps a block's linear index to (rank, head, batch) with the
  // heads fastest: each block still takes one tile, every tile once.
  Problem p = problem("bf16", 150, 64, true, 3, 4);
  const Config c = with(config(32, 32, 2, 2, 0), {{"tile_order", 1}});
  check_layout(c, p, Layout::kBSHD);
  check_layout(c, p, Layout::kBHSD);
  p.dims["kv_heads"] = 2;
  check_layout(c, p, Layout::kFusedQKV);
  check_layout(with(config(64, 16, 4, 2, 1), {{"tile_order", 1}}), problem("f32", 70, 32, true, 2, 3),
               Layout::kBSHD);
}

TEST_CASE("attention_fwd: other softmax scales", "[attention][emu]") {
  const Config c = forward_family().default_config(problem("f16", 64, 32, true));
  for (const float scale : {0.05f, 0.5f}) {
    check_layout(c, problem("f16", 50, 32, true, 2, 2), Layout::kBSHD, scale);
    check_layout(c, problem("f16", 50, 32, false, 2, 2), Layout::kBHSD, scale);
  }
  // At 4 a row's max passes its base by more than kBaseSlack at later key
  // tiles too (of 16 keys here), so the warp rescales sums and accumulators
  // that already hold keys.
  const Config narrow = config(64, 16, 4, 2, 1);
  check_layout(narrow, problem("f16", 200, 32, true), Layout::kBSHD, 4.0f);
  check_layout(narrow, problem("bf16", 200, 64, false), Layout::kBHSD, 4.0f);
}

TEST_CASE("attention_fwd: the family's check passes f32 at seq 1 and scales 3 and 10", "[attention][emu]") {
  // At seq 1 lse is the one score, which may be near 0 while its tf32 error is not: the check's atol takes it.
  // At scales 3 and 10 the scores' tf32 errors grow with the scale, and so does the tolerance of f32 problems.
  const auto& f = forward_family();
  tuner::EmuRunner runner;
  auto check = [&](const Problem& p, std::uint64_t seed, double scale) {
    tuner::RunOptions options;
    options.seed = seed;
    if (scale > 0) options.scalars = {{"scale", scale}};
    const auto r = runner.run(f, f.default_config(p), p, options);
    INFO(p.key() << " seed " << seed << " scale " << scale << ": " << r.failure);
    CHECK(r.ok);
  };
  for (const std::int64_t d : {16, 32})
    for (const bool causal : {false, true})
      for (std::uint64_t seed = 1; seed <= 6; ++seed) check(problem("f32", 1, d, causal, 1, 1), seed, 0);
  for (const char* dtype : {"f32", "bf16"})
    for (const double scale : {3.0, 10.0}) {
      check(problem(dtype, 17, 16, false, 1, 1), 1, scale);
      check(problem(dtype, 37, 64, true, 1, 2), 2, scale);
    }
}

TEST_CASE("attention_fwd: a kernel broken on purpose fails the family's check, at seq 1 and at the default scale",
          "[attention][emu]") {
  const auto& f = forward_family();
  // lse's scaled max 1 % high: at seq 1, lse (the score) 1 % off.
  for (const bool causal : {false, true}) {
    const Problem p = problem("f32", 1, 32, causal, 1, 1);
    const Config c = f.default_config(p);
    CHECK(test::emulated_check_passes(f, f.render(c, p), c, p, 5));
    const Rendered high = test::broken(f.render(c, p), "lse_h[row] = row_max[mt][r] * scale + logf(sum);",
                                       "lse_h[row] = row_max[mt][r] * (1.01f * scale) + logf(sum);");
    CHECK_FALSE(test::emulated_check_passes(f, high, c, p, 5));
  }
  // The causal mask dropped: keys after the query leak into O and lse.
  for (const char* dtype : {"f32", "bf16"}) {
    const Problem p = problem(dtype, 70, 32, true);
    const Config c = f.default_config(p);
    CHECK(test::emulated_check_passes(f, f.render(c, p), c, p, 5));
    const Rendered leaky = test::broken(f.render(c, p), "(CAUSAL && key > row)", "false");
    CHECK_FALSE(test::emulated_check_passes(f, leaky, c, p, 5));
  }
}

TEST_CASE("attention_fwd: pipeline depths, tile layouts, tile shapes and warps per block", "[attention][emu]") {
  struct Case {
    Config c;
    Problem p;
  };
  const Case cases[] = {
      // one stage; two m16 tiles per warp; swizzled 16-key tiles; a ragged causal block
      {config(64, 16, 2, 1, 1), problem("bf16", 77, 64, true)},
      // three stages, more key tiles than stages; swizzled 128-key tiles
      {config(32, 128, 2, 3, 1), problem("f16", 300, 32, false, 1, 1)},
      // eight warps; padded rows at head_dim 80 (10 chunks); causal with block_m > block_n
      {config(128, 32, 8, 3, 0), problem("bf16", 129, 80, true)},
      // swizzle over pairs of chunks at head_dim 80; block_m < block_n under a causal mask
      {config(32, 64, 2, 2, 1), problem("f16", 100, 80, true)},
      // head_dim 128, swizzled, two stages with 16-key tiles
      {config(64, 16, 4, 2, 1), problem("bf16", 45, 128, false)},
      // the defaults of long 16-bit sequences up to head_dim 80: two m16 tiles per warp, Q re-read from
      // shared memory per key tile
      {config(128, 64, 4, 2, 0, 0), problem("bf16", 150, 64, true)},
      {config(128, 32, 4, 2, 0, 0), problem("f16", 150, 80, false)},
      // ... at head_dim 128, causal and ragged
      {config(128, 16, 4, 2, 0, 0), problem("bf16", 200, 128, true)},
      // the default of long 16-bit sequences at head_dim 128: eight warps of one tile, Q in registers,
      // swizzled 64-key tiles; causal and ragged
      {config(128, 64, 8, 2, 1, 1), problem("bf16", 200, 128, true)},
      // ... swizzled, one stage, at head_dim 80 (five k steps) and 16
      {config(64, 32, 2, 1, 1, 0), problem("f16", 77, 80, false)},
      {config(32, 16, 2, 3, 1, 0), problem("bf16", 45, 16, true)},
      // 48-key tiles (three k16 steps of P V, not a power of two): two m16 tiles per warp, Q re-read, swizzled,
      // at head_dim 128, causal and ragged (200 = 4 x 48 + 8); block_m < block_n under a causal mask, padded, three
      // stages; head_dim 80
      {config(128, 48, 4, 2, 1, 0), problem("bf16", 200, 128, true)},
      {config(32, 48, 2, 3, 0), problem("f16", 150, 64, true)},
      {config(64, 48, 4, 2, 1), problem("bf16", 97, 80, false)},
  };
  for (const auto& [c, p] : cases) {
    check_layout(c, p, Layout::kBSHD);
    check_layout(c, p, Layout::kBHSD);
  }
}

TEST_CASE("attention_fwd: f32 inputs on the tf32 matrix units, ragged and strided", "[attention][emu]") {
  const Config c = forward_family().default_config(problem("f32", 64, 64, true));
  for (const bool causal : {false, true})
    for (const std::int64_t seq : {1, 17, 129})
      for (const Layout layout : {Layout::kBSHD, Layout::kFusedQKV})
        check_layout(c, problem("f32", seq, 64, causal), layout);
  // swizzled 4-float chunks and three stages at head_dim 80; the default at 128; two m16 tiles per warp
  check_layout(config(64, 32, 4, 3, 1), problem("f32", 70, 80, true), Layout::kBHSD);
  check_layout(forward_family().default_config(problem("f32", 45, 128, false)), problem("f32", 45, 128, false),
               Layout::kBSHD);
  check_layout(config(64, 16, 2, 1, 1), problem("f32", 33, 16, true), Layout::kBSHD);
  // Q's tf32 fragments re-read from shared memory per key tile
  check_layout(config(64, 16, 2, 2, 0, 0), problem("f32", 70, 64, true), Layout::kBHSD);
  // 48-key tiles: six k8 steps of P V
  check_layout(config(64, 48, 4, 2, 1), problem("f32", 100, 64, true), Layout::kBSHD);
}

TEST_CASE("attention_fwd: grouped-query attention, K and V heads shared by query heads", "[attention][emu]") {
  for (const char* dtype : {"bf16", "f32"}) {
    Problem p = problem(dtype, 45, 32, true, 1, 4);
    p.dims["kv_heads"] = 2;
    const Config c = forward_family().default_config(p);
    for (const Layout layout : {Layout::kBSHD, Layout::kBHSD, Layout::kFusedQKV}) check_layout(c, p, layout);
    p.dims["kv_heads"] = 1;  // multi-query
    p.dims["causal"] = 0;
    check_layout(c, p, Layout::kBSHD);
  }
}

/// A break of the wgmma kernel: `from` becomes `to` in its text, after its
/// name (attention.cuh's kernel precedes it), or anywhere (the first place,
/// for the helpers of attention_common.cuh).
struct Break {
  const char* what;
  const char* from;
  const char* to;
  bool anywhere = false;
};

/// Checks that config `c` matches the reference on `p` (at `scale`, 0 the
/// default), and that each break fails it: a wrong O, or an operand read
/// past shared memory, which the emulation reports.
void check_breaks(const Config& c, const Problem& p, float scale, std::initializer_list<Break> breaks) {
  const auto& f = forward_family();
  REQUIRE(run_layout(c, p, Layout::kBSHD, scale).o < tolerance_for(p.dtype));
  for (const Break& b : breaks) {
    INFO(b.what);
    Rendered r = f.render(c, p);
    const std::size_t kernel = r.source.find("attention_fwd_wgmma(");
    REQUIRE(kernel != std::string::npos);
    const std::size_t at = r.source.find(b.from, b.anywhere ? 0 : kernel);
    REQUIRE(at != std::string::npos);
    r.source.replace(at, std::strlen(b.from), b.to);
    bool failed = true;
    try {
      failed = !(run_layout(c, p, Layout::kBSHD, scale, 5, &r).o < tolerance_for(p.dtype));
    } catch (const std::exception& e) {
      UNSCOPED_INFO(e.what());
    }
    CHECK(failed);
  }
}

TEST_CASE("attention_fwd on wgmma: a kernel broken on purpose fails the reference", "[attention][emu]") {
  check_breaks(wgmma_forward(128, 64, 2), problem("bf16", 200, 128, true), 0,
               {{"the causal mask dropped", "mask_scores<1, NT, CAUSAL>", "mask_scores<1, NT, false>"},
                {"V read K-major", "wgmma_rs<HEAD_DIM, T, 1>", "wgmma_rs<HEAD_DIM, T, 0>"},
                {"every warpgroup's S from the first one's rows", "QLayout::offset(group_row0, col)",
                 "QLayout::offset(0, col)"},
                {"P V's second panel not at LBO", "1, KVLayout::PANEL_BYTES, 1024", "1, 16, 1024"}});
}

TEST_CASE("attention_fwd on wgmma, in turn (mma 1) and overlapped (mma 2): head dims 64 and 128, masks, ragged "
          "lengths, tile shapes, stages, warpgroups, grouped heads, tile orders, and O's rescale",
          "[attention][emu]") {
  struct Case {
    Config c;
    Problem p;
  };
  Problem grouped = problem("bf16", 150, 128, true, 2, 4);
  grouped.dims["kv_heads"] = 2;
  for (const std::int64_t mma : {1, 2}) {
    INFO("mma " << mma);
    const Case cases[] = {
        // the candidates' shape: two warpgroups, 128- and 64-key tiles, causal and ragged
        {wgmma_forward(128, 128, 2, mma), problem("bf16", 257, 64, true)},
        {wgmma_forward(128, 64, 2, mma), problem("f16", 200, 128, true)},
        // one warpgroup, the fewest stages, one 128-key tile past a short sequence (overlapped: no next tile's
        // S; at head_dim 64, where its registers fit); three stages of 16-key tiles
        {wgmma_forward(64, 128, mma, mma), problem("bf16", 77, mma == 1 ? 128 : 64, false)},
        {wgmma_forward(64, 16, 3, mma), problem("f16", 100, 64, true, 1, 1)},
        // 32-key tiles, grouped heads, a sequence of 1
        {wgmma_forward(128, 32, 1 + mma, mma), grouped},
        {wgmma_forward(64, 64, 2, mma), problem("bf16", 1, 64, true)},
    };
    for (const auto& [c, p] : cases) {
      check_layout(c, p, Layout::kBSHD);
      check_layout(c, p, Layout::kFusedQKV);
    }
    check_layout(with(wgmma_forward(128, 64, 2, mma), {{"tile_order", 1}}), problem("bf16", 300, 64, true, 2, 3),
                 Layout::kBHSD);
    // At scale 4 a row's max moves past its base at later key tiles: O's rescale between products (in turn),
    // once P V completes (overlapped).
    check_layout(wgmma_forward(64, 16, 2, mma), problem("bf16", 120, 64, true), Layout::kBSHD, 4.0f);
  }
}

TEST_CASE("attention_fwd on wgmma overlapped: a kernel broken on purpose fails the reference", "[attention][emu]") {
  // At scale 4 the bases move after the first key tile, so O's rescale matters.
  check_breaks(wgmma_forward(64, 16, 2, 2), problem("bf16", 120, 64, true), 4.0f,
               {{"O's rescale dropped", "if (moved) rescale_o();", ""},
                {"O rescaled before P V completes",
                 "kt::wgmma_wait<0>();\n      kt::wgmma_fence_operand(acc);\n      if (moved) rescale_o();",
                 "if (moved) rescale_o();\n      kt::wgmma_wait<0>();\n      kt::wgmma_fence_operand(acc);"},
                {"the next tile's S read before its wait", "kt::wgmma_wait<1>();", "kt::wgmma_wait<2>();"},
                {"the next tile's S from this tile's K", "issue_scores(sk + (n + 1) % STAGES * TILE_KV)",
                 "issue_scores(sk + n % STAGES * TILE_KV)"},
                {"a step's tiles not waited for", "kt::cp_async_wait<STAGES - 2>();",
                 "kt::cp_async_wait<STAGES - 1>();"}});
}

TEST_CASE("attention_fwd on wgmma with the warpgroups taking turns (pingpong), in turn and overlapped: head dims 64 "
          "and 128, masks, ragged lengths, tile shapes, stages, grouped heads, tile orders, and O's rescale",
          "[attention][emu]") {
  Problem grouped = problem("bf16", 150, 128, true, 2, 4);
  grouped.dims["kv_heads"] = 2;
  for (const std::int64_t mma : {1, 2}) {
    INFO("mma " << mma);
    const std::pair<Config, Problem> cases[] = {
        // the candidates' shape: 128- and 64-key tiles, causal and ragged
        {wgmma_forward(128, 128, 2, mma, 1), problem("bf16", 257, 64, true)},
        {wgmma_forward(128, 64, 2, mma, 1), problem("f16", 200, 128, true)},
        // the fewest stages, 32-key tiles, grouped heads; three stages of 16-key tiles, no mask; a sequence of 1
        {wgmma_forward(128, 32, mma, mma, 1), grouped},
        {wgmma_forward(128, 16, 3, mma, 1), problem("f16", 100, 64, false, 1, 1)},
        {wgmma_forward(128, 64, 2, mma, 1), problem("bf16", 1, 64, true)},
    };
    for (const auto& [c, p] : cases) {
      check_layout(c, p, Layout::kBSHD);
      check_layout(c, p, Layout::kFusedQKV);
    }
    check_layout(with(wgmma_forward(128, 64, 2, mma, 1), {{"tile_order", 1}}), problem("bf16", 300, 64, true, 2, 3),
                 Layout::kBHSD);
    check_layout(wgmma_forward(128, 16, 2, mma, 1), problem("bf16", 120, 64, true), Layout::kBSHD, 4.0f);
  }
}

TEST_CASE("attention_fwd on wgmma taking turns: a kernel broken on purpose fails", "[attention][emu]") {
  for (const std::int64_t mma : {1, 2})
    check_breaks(wgmma_forward(128, 32, 2, mma, 1), problem("bf16", 150, 64, true), 0,
                 {{"warpgroup 0 never let start", "turns.start();", ""},
                  {"warpgroup 0 let go after warpgroup 1's last products", "else if (!last)", "else", true},
                  {"warpgroup 1 never let go", "kt::named_barrier_arrive<2, 256>();", ";", true}});
}

}  // namespace templates_attention_family_emu_test
