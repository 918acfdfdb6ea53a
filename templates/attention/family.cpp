// The attention forward family: space, constraints, rendering, launch plan,
// workload with the streaming CPU reference, FLOP/byte counts.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>

#include "base/error.hpp"
#include "templates/attention/attention.hpp"
#include "templates/attention/workload_common.hpp"
#include "templates/common/family_helpers.hpp"
#include "templates/render.hpp"

namespace ktune::templates::attention {
namespace {

constexpr const char* kTemplate = "attention/attention.cuh";
constexpr const char* kWgmmaTemplate = "attention/attention_wgmma.cuh";
constexpr std::int64_t kMaxTilesPerWarp = 2;  // m16 tiles of query rows one warp owns
// Registers besides the fragments, accumulators and copy addresses:
// indices, strides, loop state (fitted with fragment_registers).
constexpr std::int64_t kBaseRegisters = 32;
// Under a causal mask, the block's rank, head and batch (block_tile) are
// held where blockIdx was read again. It tips the configs that hold the most
// (Q in registers for two m16 tiles a warp) at the limit: two at head_dim 80
// spilled 8 bytes at sm_80 without this term.
constexpr std::int64_t kTileOrderRegisters = 4;
// The device struct attention::Strides is three 64-bit fields in this order.
static_assert(sizeof(TensorStrides) == 24 && offsetof(TensorStrides, head) == 8 && offsetof(TensorStrides, seq) == 16);

/// m16 tiles of query rows per warp.
std::int64_t tiles_per_warp(const Config& c) { return c.at("block_m") / (16 * c.at("warps")); }

/// Registers per thread besides kBaseRegisters: per m16 tile of the warp,
/// Q's A fragments (every k step's when kept in registers, else the one
/// being used), the score tile, the O accumulator and the row statistics;
/// K's B fragments of a tile, of which ptxas keeps about 3/8 live at once;
/// the copies' addresses of the Q, K and V tiles (copy_registers); and 20
/// more in 2-warp blocks, whose long copy loops ptxas keeps more of. Fitted
/// to NVRTC's counts (sm_80 and sm_90, every head dim and dtype, Q in
/// registers or not): from about 40 under them to 80 over (over where
/// registers are few), and over the whole space for the problem classes no
/// config it admits spills. Where the copies walk one pointer, checked
/// again with ptxas 13.0 (nvcc -cubin --resource-usage) on the 49 configs
/// estimated at 240 to 255 or admitted only so (bf16 and fp32, head dims 16
/// to 128): none spills at sm_80 or sm_90.
///
/// Four terms were refitted with 48-key tiles, against ptxas (NVRTC, ktune's
/// options) on every config admitted then and on the 16-bit configs of 32-,
/// 48- and 64-key tiles at head dims 64, 80 and 128 estimated at 200 to 300:
/// one stage takes about 12 more (sm_90: 10 to 25 more than two stages in
/// two-tile configs, where the next tile's copies wait for the barrier after
/// the products); two m16 tiles re-reading Q hold 6 fewer (each K fragment
/// feeds both tiles as it is loaded); XOR swizzles of rows that are not a
/// multiple of 8 chunks (16-bit head dims up to 80) 16 more, and padded rows
/// of a multiple of 8 chunks 2 more (at head_dim 128, 48-key tiles in padded
/// rows spill 4 to 20 bytes at sm_90 where swizzled ones take 252
/// registers). Of about 1900 configs admitted at each of sm_80 and sm_90,
/// the spilling ones went from 2 and 5 to none, and FlashAttention-2's shape
/// at head_dim 128 with 48-key tiles is admitted (two m16 tiles per warp, Q
/// re-read, swizzled, 2 or 3 stages).
std::int64_t fragment_registers(const Config& c, const Problem& p) {
  const std::int64_t d = p.dim("head_dim"), bn = c.at("block_n"), e = element_bytes(p), warps = c.at("warps");
  const bool swizzled = c.at("kv_layout") == 1;
  const std::int64_t copies = copy_registers(c.at("block_m"), p, swizzled, 32 * warps) +
                              2 * copy_registers(bn, p, swizzled, 32 * warps);
  const bool q_regs = c.at("q_regs") != 0;
  const std::int64_t q_fragments = q_regs ? d * e / 8 : 4;
  const bool whole_swizzle = d * e / 16 % 8 == 0;  // rows of a multiple of 8 16-byte chunks
  const std::int64_t layout = swizzled ? (whole_swizzle ? 0 : 16) : (whole_swizzle ? 2 : 0);
  return tiles_per_warp(c) * (q_fragments + d / 2 + bn / 2 + 4) + 3 * d * bn * e / 1024 + copies +
         (warps == 2 ? 20 : 0) + (c.at("stages") == 1 ? 12 : 0) - (tiles_per_warp(c) == 2 && !q_regs ? 6 : 0) +
         layout + (p.dim("causal") && q_regs && tiles_per_warp(c) == 2 ? kTileOrderRegisters : 0);
}

/// The wgmma kernel's registers per thread: S's accumulator (block_n / 2),
/// O's (head_dim / 2), P's A fragments (block_n / 8), and about 48 besides
/// (indices, strides, row statistics, copy and descriptor addresses).
/// Overlapped (mma 2), P's A fragments stay live beside the next tile's S
/// (block_n / 4 in all), and ptxas keeps 2 more per 16-byte chunk a thread
/// copies of a K and a V tile. Fitted to ptxas (NVRTC, sm_90a) over the
/// problem classes: mma 2 at head_dim 128 over one warpgroup with 128-key
/// tiles (32 chunks a thread) spills 304 to 384 bytes and is estimated at
/// 272; every config admitted takes 87 to 255 registers without spilling
/// (255 for 128-key tiles at head_dim 128 over two warpgroups, estimated at
/// 240).
std::int64_t wgmma_registers(const Config& c, const Problem& p) {
  const std::int64_t bn = c.at("block_n"), d = p.dim("head_dim");
  if (c.at("mma") == 2) return 48 + bn / 2 + d / 2 + bn / 4 + 2 * (2 * bn * d / 8) / (32 * c.at("warps"));
  return 48 + bn / 2 + d / 2 + bn / 8;
}

/// Why a config of the wgmma kernel (mma 1 or 2) cannot run on `d`, or "".
std::string wgmma_invalid(const Config& c, const Problem& p, const DeviceLimits& d) {
  const std::int64_t bn = c.at("block_n"), warps = c.at("warps"), mma = c.at("mma");
  if (std::string no = wgmma_unsupported(p, d); !no.empty()) return fmt::format("mma {}: {}", mma, no);
  if (warps % 4 != 0 || c.at("block_m") != 16 * warps)
    return fmt::format("mma {} (wgmma): each warpgroup (4 warps) owns 64 query rows, so block_m is 16 x warps "
                       "(block_m {}, {} warps)",
                       mma, c.at("block_m"), warps);
  if (bn != 16 && bn != 32 && bn != 64 && bn != 128)
    return fmt::format("mma {} (wgmma): block_n is 16, 32, 64 or 128", mma);
  if (c.at("kv_layout") != 1)
    return fmt::format("mma {} (wgmma) reads tiles in its 128-byte swizzle: kv_layout 1", mma);
  if (c.at("q_regs") != 0) return fmt::format("mma {} (wgmma) reads Q from shared memory: q_regs 0", mma);
  if (mma == 2 && c.at("stages") < 2)
    return "mma 2 (wgmma, overlapped) reads the next key tile beside this one's values: stages 2 or more";
  if (c.at("pingpong") && warps != 8) return "pingpong 1 has two warpgroups take turns: 8 warps, block_m 128";
  if (std::string no = wgmma_over_registers(wgmma_registers(c, p), warps, d, "scores, O, P"); !no.empty())
    return fmt::format("mma {}: {}", mma, no);
  return "";
}

/// Elements between rows of a shared-memory tile (templates' TileLayout::ROW).
std::int64_t tile_row(const Config& c, const Problem& p) {
  return p.dim("head_dim") + (c.at("kv_layout") == 0 ? 16 / element_bytes(p) : 0);
}

class Forward final : public TypedFamily<ForwardArgs> {
 public:
  Forward()
      : space_({{"block_m", {32, 64, 128},
                 "query rows per block: more reuse of each K/V tile vs more blocks in flight"},
                {"block_n", {16, 32, 48, 64, 128},
                 "keys per tile: fewer rescales and barriers vs score registers and shared memory"},
                {"warps", {2, 4, 8},
                 "warps per block (block_m / warps rows each): more warps vs more rows per warp (registers)"},
                {"stages", {1, 2, 3}, "K/V tiles in flight: load latency hidden vs shared memory"},
                {"kv_layout", {0, 1},
                 "shared-memory rows: 0 padded by 16 bytes (conflict-free, more memory), 1 XOR-swizzled (packed; "
                 "conflict-free when head_dim is a multiple of 64)"},
                {"q_regs", {0, 1},
                 "Q's fragments: 1 loaded once into registers (no shared-memory reads for Q) vs 0 re-read from "
                 "shared memory per key tile (registers left for two m16 tiles per warp or wider key tiles)"},
                // attention.cuh's block_tile; a kernel argument: the second order compiles nothing new
                {"tile_order", {0, 1},
                 "order of the query tiles over the grid under a causal mask: 0 each head's together, longest first "
                 "(its K and V shared in L2), 1 the longest of every head first, the shortest last (no head's "
                 "longest tile left to run alone at the end)"},
                {"mma", {0, 1, 2},
                 "matrix instructions: 0 mma.sync by each warp (sm_80 on), 1 wgmma by each warpgroup of 4 warps "
                 "(sm_90's arch-specific target sm_90a: S from Q and K in shared memory, O += P V with P in "
                 "registers; 16-bit inputs, head dims 64 and 128), 2 wgmma as 1 with the next key tile's S and "
                 "softmax beside this tile's P V (a second score tile in registers, 2 stages or more)"},
                {"pingpong", {0, 1},
                 "with wgmma (mma 1 or 2) over two warpgroups: 1 they issue their products in turns (named "
                 "barriers), one's softmax beside the other's products, where 0 issues both together and leaves "
                 "the tensor cores idle while both softmaxes run"}}) {}

  std::string name() const override { return "attention_fwd"; }
  std::string summary() const override {
    return "attention forward (FlashAttention-2 style; mma.sync, or wgmma on sm_90): O and the row lse, causal or "
           "not, any strides";
  }
  std::vector<std::string> source_files() const override { return {kTemplate, kWgmmaTemplate}; }
  const Space& space() const override { return space_; }

  std::vector<Problem> problem_classes() const override { return attention_problem_classes(); }

  void check_problem(const Problem& p) const override { check_attention_problem(name(), p); }

  Config default_config(const Problem& p) const override {
    // On a grid of at least kBusyGrid 128-row blocks, 16-bit inputs take
    // FlashAttention-2's shape on A100 and H100: 128 query rows over 4
    // warps, two m16 tiles per warp with Q re-read from shared memory (each
    // K and V fragment read from shared memory feeds two mmas instead of
    // one), two stages of key tiles:
    // - up to head_dim 80, 64-key tiles up to head_dim 64, else 32, in
    //   padded rows (about 230 and 200 registers, NVRTC sm_80 and sm_90). At
    //   the CS336 leaderboard's shape on an H200: 2.15 ms, the previous
    //   default (the one below) 2.29 ms.
    // - above, 48-key tiles in swizzled rows (252 registers): the winner of
    //   the causal forward at head_dim 128, seq 16384 tuned on an H200, and
    //   beside it 3.24 ms, against 3.42 ms with 32-key tiles and 3.58 ms for
    //   128 rows over 8 warps of one tile with Q in registers.
    // Otherwise 64 query rows, one m16 tile per warp with Q in registers,
    // and the widest key tile of 64 (up to head_dim 64), 32 or 16 within the
    // register estimate: 150-200 registers for 16-bit types (64-key tiles
    // take ~235 at head_dim 128), and 16-key tiles for tf32 at head_dim 128.
    // Key tiles double-buffered, in padded rows unless said. Shared memory:
    // 96 KB at most, so head_dim 128 runs with the opt-in.
    check_problem(p);
    const DeviceLimits any = DeviceLimits::for_arch("sm_80");
    const std::int64_t d = p.dim("head_dim");
    if (element_bytes(p) == 2 && blocks_of_128(p) >= kBusyGrid) {
      const Config c({{"block_m", 128}, {"block_n", d <= 64 ? 64 : d <= 80 ? 32 : 48}, {"warps", 4}, {"stages", 2},
                      {"kv_layout", d <= 80 ? 0 : 1}, {"q_regs", 0}, {"tile_order", 0}, {"mma", 0},
                      {"pingpong", 0}});
      if (is_valid(c, p, any, nullptr)) return c;
    }
    for (const std::int64_t block_n : {64, 32, 16}) {
      const Config c({{"block_m", 64}, {"block_n", block_n}, {"warps", 4}, {"stages", 2}, {"kv_layout", 0},
                      {"q_regs", 1}, {"tile_order", 0}, {"mma", 0}, {"pingpong", 0}});
      if ((block_n < 64 || d <= 64) && is_valid(c, p, any, nullptr)) return c;
    }
    throw_error(ErrorKind::kInternal, "attention_fwd: no valid default config for " + p.key());
  }

  std::optional<Config> arch_default(const Problem& p, const DeviceLimits&) const override {
    // Where the wgmma kernel runs (sm_90), 16-bit inputs at head dims 64 and
    // 128 on a grid of at least kBusyGrid 128-row blocks take it: 128 query
    // rows over two warpgroups, key tiles in swizzled rows, two stages.
    // Measured on an H200 (bench/results/h200-2026-11-27-wgmma.md), causal,
    // batch 1, 16 heads, seq 16384:
    // - head_dim 64 (the CS336 leaderboard): 64-key tiles in turn (mma 1),
    //   the longest tiles of every head first: 1.475 ms, the winner of a
    //   20 s tuning session, against 1.897 ms for default_config;
    // - head_dim 128: 128-key tiles overlapped (mma 2): 2.519 ms, in turn
    //   2.713 ms, default_config 3.278 ms.
    const std::int64_t d = p.dim("head_dim");
    if (element_bytes(p) != 2 || (d != 64 && d != 128) || blocks_of_128(p) < kBusyGrid) return std::nullopt;
    return Config({{"block_m", 128}, {"block_n", d}, {"warps", 8}, {"stages", 2}, {"kv_layout", 1}, {"q_regs", 0},
                   {"tile_order", d == 64 ? p.dim("causal") : 0}, {"mma", d == 64 ? 1 : 2}, {"pingpong", 0}});
  }

  std::vector<Config> candidates(const Problem& p) const override {
    // For 16-bit inputs above head_dim 64, FlashAttention-2's forward shape
    // (128 query rows over 4 warps, two m16 tiles each, Q re-read from
    // shared memory) with swizzled tiles of 32 and 48 keys, and 128 rows
    // over 8 warps of one tile, Q in registers, 64-key swizzled tiles; the
    // default's stages; the default itself left out. Up to head_dim 64 the
    // default is FlashAttention-2's shape with 64-key tiles, and the H200's
    // session at the leaderboard's shape measured these others slower
    // (32-key tiles 2.39 ms, 8 warps of one tile 2.49, the default 2.13).
    // Under a causal mask, first the default with the longest tiles of every
    // head first (tile_order 1).
    // For 16-bit inputs at head dims 64 and 128, the wgmma kernel (valid on
    // sm_90 alone): 128 query rows over two warpgroups, 128- and 64-key
    // tiles, each in turn (mma 1) and overlapped (mma 2), each with the two
    // warpgroups' products together and in turns (pingpong), under a causal
    // mask with the longest tiles first (as the sm_90 default at head_dim
    // 64), so the eight compare like with like.
    // Before all these, for a short sequence (at most four of the default's
    // key tiles, as the model's contexts of 256, where each block walks a
    // few tiles and waits on each one's loads) the default with every key
    // tile of a head in flight at once: 128-key tiles, and its own tiles
    // three stages deep.
    const Config def = default_config(p);
    std::vector<Config> out;
    if (p.dim("seq") <= 4 * def.at("block_n"))
      for (const Config& c : {with(def, {{"block_n", 128}}), with(def, {{"stages", 3}})})
        if (c != def && is_valid(c, p, DeviceLimits::for_arch("sm_80"), nullptr)) out.push_back(c);
    if (p.dim("causal")) out.push_back(with(def, {{"tile_order", 1}}));
    if (element_bytes(p) == 2 && (p.dim("head_dim") == 64 || p.dim("head_dim") == 128))
      for (const std::int64_t bn : {128, 64})
        for (const std::int64_t mma : {1, 2})
          for (const std::int64_t pingpong : {0, 1})
            out.push_back(with(def, {{"block_m", 128}, {"block_n", bn}, {"warps", 8}, {"stages", 2},
                                     {"kv_layout", 1}, {"q_regs", 0}, {"tile_order", p.dim("causal")},
                                     {"mma", mma}, {"pingpong", pingpong}}));
    if (element_bytes(p) != 2 || p.dim("head_dim") <= 64) return out;
    for (const std::int64_t bn : {32, 48})
      out.push_back(with(def, {{"block_m", 128}, {"block_n", bn}, {"warps", 4}, {"q_regs", 0}, {"kv_layout", 1}}));
    out.push_back(with(def, {{"block_m", 128}, {"block_n", 64}, {"warps", 8}, {"q_regs", 1}, {"kv_layout", 1}}));
    std::erase(out, def);
    return out;
  }

  bool is_valid(const Config& c, const Problem& p, const DeviceLimits& d, std::string* why) const override {
    const std::int64_t bm = c.at("block_m"), bn = c.at("block_n"), warps = c.at("warps");
    const std::int64_t threads = 32 * warps;
    if (threads > d.max_threads_per_block) return reject(why, "threads exceed the device's block limit");
    if (c.at("tile_order") == 1 && p.dim("causal") == 0)
      return reject(why, "tile_order 1 orders tiles of unequal work; without a causal mask every tile has the same");
    if (c.at("mma") != 0) {
      if (const std::string no = wgmma_invalid(c, p, d); !no.empty()) return reject(why, no);
      return fits_shared(c, p, d, why);
    }
    if (c.at("pingpong")) return reject(why, "pingpong 1 has wgmma's warpgroups take turns (mma 1 or 2)");
    if (bm % (16 * warps) != 0)
      return reject(why, fmt::format("each warp owns whole 16-row tiles of the queries: block_m {} is not a "
                                     "multiple of 16 x {} warps",
                                     bm, warps));
    if (tiles_per_warp(c) > kMaxTilesPerWarp)
      return reject(why, fmt::format("each warp would own {} query rows; at most {} (their scores and O "
                                     "accumulators live in registers): add warps or lower block_m",
                                     bm / warps, 16 * kMaxTilesPerWarp));
    const std::int64_t registers = kBaseRegisters + fragment_registers(c, p);
    const std::int64_t budget = std::min<std::int64_t>(d.max_regs_per_thread, d.regs_per_sm / threads);
    if (registers > budget)
      return reject(why, fmt::format("each thread would need about {} registers for its Q and K fragments, scores, "
                                     "O accumulator and copies (head_dim {}, {} rows per warp, {}-key tiles), over "
                                     "the {} a block of {} threads allows: it would spill",
                                     registers, p.dim("head_dim"), bm / warps, bn, budget, threads));
    return fits_shared(c, p, d, why);
  }

  /// Whether the Q tile and the stages of K and V tiles fit a block's shared memory.
  static bool fits_shared(const Config& c, const Problem& p, const DeviceLimits& d, std::string* why) {
    const std::int64_t smem = shared_bytes(c, p);
    if (smem > d.max_smem_per_block)
      return reject(why, fmt::format("needs {} bytes of shared memory (the Q tile and {} stages of K and V tiles), "
                                     "over the {} bytes a block of {} may use",
                                     smem, c.at("stages"), d.max_smem_per_block, d.arch));
    return true;
  }

  Rendered render(const Config& c, const Problem& p) const override {
    if (c.at("mma") != 0) {
      Rendered r = render_template(
          kWgmmaTemplate,
          {fmt::format("attention::attention_fwd_wgmma<{}, {}, {}, {}, {}, {}, {}, {}, {}>", p.dim("head_dim"),
                       c.at("block_m"), c.at("block_n"), c.at("warps") / 4, c.at("stages"),
                       c.at("mma") == 2 ? "true" : "false", c.at("pingpong") ? "true" : "false",
                       p.dim("causal") ? "true" : "false", element_type(p))},
          name());
      r.arch_specific = true;
      return r;
    }
    return render_template(
        kTemplate,
        {fmt::format("attention::attention_fwd<{}, {}, {}, {}, {}, {}, {}, {}, {}>", p.dim("head_dim"),
                     c.at("block_m"), c.at("block_n"), c.at("warps"), c.at("stages"), c.at("kv_layout"),
                     c.at("q_regs") ? "true" : "false", p.dim("causal") ? "true" : "false", element_type(p))},
        name());
  }

  std::vector<BufferShape> buffer_shapes(const Problem& p) const override {
    check_problem(p);
    const AttentionShape s = shape_of(p);
    const std::int64_t n = s.batch * s.seq * s.heads * s.head_dim, kv_n = n / (s.heads / s.kv_heads);
    const DType e = element_dtype(p);
    return {buffer_shape("q", Role::kInput, e, n), buffer_shape("k", Role::kInput, e, kv_n),
            buffer_shape("v", Role::kInput, e, kv_n), buffer_shape("o", Role::kOutput, e, n),
            buffer_shape("lse", Role::kOutput, DType::kF32, s.batch * s.heads * s.seq)};
  }

  Workload make_workload(const Problem& p, std::uint64_t seed) const override { return make_workload(p, seed, {}); }
  Workload make_workload(const Problem& p, std::uint64_t seed, const Scalars& given) const override {
    check_problem(p);
    const float scale = args_with_scalars(p, given).scale;
    const AttentionShape s = shape_of(p);
    const auto n = static_cast<std::size_t>(s.batch * s.seq * s.heads * s.head_dim);
    const auto rows = static_cast<std::size_t>(s.batch * s.heads * s.seq);
    // Scores scale * q.k with a spread of about 1.3 whatever the head dim:
    // peaked enough that a key masked wrongly moves O well past tolerance.
    // Past the reference budget, rows outside a seeded sample get q = 0
    // (sample_rows): their O and lse are exact and cheap. The sample's rows
    // are judged apart from them, and timed runs take q as drawn.
    std::mt19937_64 rng(seed);
    const std::size_t kv_n = n / static_cast<std::size_t>(s.heads / s.kv_heads);
    auto q = draw_stored(p, rng, n, -2.f, 2.f);
    const auto k = draw_stored(p, rng, kv_n, -2.f, 2.f), v = draw_stored(p, rng, kv_n, -1.f, 1.f);
    const auto checked = sample_rows(s, seed, 3.0);  // the reference (2) and softmax_square_sums (1) per key
    const bool sample = is_sample(checked);
    const std::vector<std::byte> q_timed = sample ? element_buffer("q", Role::kInput, p, q).bytes
                                                  : std::vector<std::byte>();
    zero_unchecked(s, checked, {&q});
    std::vector<double> o(n), lse(rows);
    const TensorStrides st = bshd_strides(s), kv_st = kv_strides(s);
    attention_forward_streaming<double>(q.data(), k.data(), v.data(), o.data(), lse.data(), s, st, kv_st, kv_st, st,
                                        scale, 0, s.batch * s.heads, checked.data());
    fill_unchecked(s, checked, v, o, lse);
    Workload w;
    w.buffers.push_back(element_buffer("q", Role::kInput, p, q));
    w.buffers.back().timed = q_timed;
    w.buffers.push_back(element_buffer("k", Role::kInput, p, k));
    w.buffers.push_back(element_buffer("v", Role::kInput, p, v));
    HostBuffer out = element_buffer("o", Role::kOutput, p, std::vector<double>(n));
    out.expected = element_buffer("o", Role::kOutput, p, o).bytes;
    out.tolerance = tolerance_for(compute_dtype(p)) * score_error_growth(p, scale);
    if (sample) out.apart = checked_elements(s, checked);
    w.buffers.push_back(std::move(out));
    // With 16-bit inputs lse is computed in fp32 from exactly the inputs
    // (exact products, fp32 sums of at most head_dim of them, ex2.approx within
    // 2 ulp, an fp32 sum of at most seq terms): nothing rounds to 16 bits on
    // its way, so fp32's tolerance applies, and a P rounded before summing
    // would not pass. With f32 inputs the scores come from q and k rounded to
    // tf32 (relative errors of 2-5e-5 in a simulation), so tf32's applies.
    // lse_i = log sum_j exp(s_ij) takes the scores' absolute errors, sum_j
    // P_ij ds_ij, of RMS sqrt(sum_j P_ij^2) times a score's: all of one
    // score's at one key (seq 1, where lse is the score, which may be near 0
    // while its error is not). So the check also passes an RMS error within
    // the tolerance times the scores' spread sigma (score_spread) times
    // sqrt(mean_i sum_j P_ij^2). With tf32 a score's error has an RMS of
    // sqrt(2/3) u sigma (u = 2^-11, about tf32's tolerance): three tolerances
    // are 3.7 times that, past what a few rows of seq 1 draw. Longer rows add
    // log(keys) to lse while sum_j P_ij^2 falls: there the relative check
    // is the looser, as before.
    double p_squares = 0;
    for (const double row : softmax_square_sums(s, checked, q, k, lse, scale)) p_squares += row;
    HostBuffer l = make_buffer("lse", Role::kOutput, DType::kF32, std::vector<float>(rows));
    set_expected(l, std::vector<float>(lse.begin(), lse.end()));
    l.tolerance = tolerance_for(is_tf32(p) ? "tf32" : "f32");
    if (sample) l.apart = checked;
    l.atol = (is_tf32(p) ? 3 : 1) * l.tolerance * score_spread(p, q, k, scale) *
             std::sqrt(p_squares / static_cast<double>(rows));
    w.buffers.push_back(std::move(l));
    return w;
  }

  ForwardArgs args_of(const Problem& p, const std::vector<std::uint64_t>& a) const override {
    KTUNE_REQUIRE(a.size() == 5, fmt::format("attention_fwd: expects the addresses of q, k, v, o, lse; got {}",
                                             a.size()));
    const AttentionShape s = shape_of(p);
    const TensorStrides st = bshd_strides(s), kv_st = kv_strides(s);
    return ForwardArgs{.q = a[0], .k = a[1], .v = a[2], .o = a[3], .lse = a[4], .q_strides = st,
                       .k_strides = kv_st, .v_strides = kv_st, .o_strides = st,
                       .scale = default_scale(p.dim("head_dim"))};
  }

  /// The softmax scale: 1/sqrt(head_dim), the usual one.
  Scalars scalars(const Problem& p) const override { return {{"scale", shortest(default_scale(p.dim("head_dim")))}}; }
  void set_scalars(ForwardArgs& args, const Problem&, const Scalars& s) const override {
    KTUNE_REQUIRE(s.at("scale") > 0, fmt::format("{}: the softmax scale must be positive, got {:g}", name(),
                                                 s.at("scale")));
    args.scale = f32_scalar(name(), "scale", s.at("scale"));
  }

  using TypedFamily<ForwardArgs>::plan;
  std::vector<Launch> plan(const Config& c, const Problem& p, const ForwardArgs& a,
                           const DeviceLimits&) const override {
    check_problem(p);
    require_aligned(name(), "q", a.q, 16);
    require_aligned(name(), "k", a.k, 16);
    require_aligned(name(), "v", a.v, 16);
    require_aligned(name(), "o", a.o, 16);
    require_aligned(name(), "lse", a.lse, 4);
    require_strides(name(), "q", a.q_strides, element_bytes(p));
    require_strides(name(), "k", a.k_strides, element_bytes(p));
    require_strides(name(), "v", a.v_strides, element_bytes(p));
    require_strides(name(), "o", a.o_strides, element_bytes(p));
    KTUNE_REQUIRE(std::isfinite(a.scale) && a.scale > 0,
                  fmt::format("attention_fwd: the softmax scale must be positive and finite, got {}", a.scale));
    Launch l;
    l.grid = {static_cast<unsigned>(ceil_div(p.dim("seq"), c.at("block_m"))), static_cast<unsigned>(p.dim("heads")),
              static_cast<unsigned>(p.dim("batch"))};
    l.block = {static_cast<unsigned>(32 * c.at("warps")), 1, 1};
    l.dynamic_smem = static_cast<unsigned>(shared_bytes(c, p));
    l.args.add(a.q).add(a.k).add(a.v).add(a.o).add(a.lse);
    l.args.add(a.q_strides).add(a.k_strides).add(a.v_strides).add(a.o_strides);
    const AttentionShape s = shape_of(p);
    l.args.add(static_cast<int>(s.seq)).add(static_cast<int>(s.heads)).add(static_cast<int>(s.heads / s.kv_heads));
    l.args.add(a.scale).add(static_cast<int>(c.at("tile_order")));
    std::vector<Launch> launches;
    launches.push_back(std::move(l));
    return launches;
  }

  double flops(const Problem& p) const override {  // Q K^T and P V: 2 * 2 * S * S * d per head, half under a mask
    const double s = static_cast<double>(p.dim("seq"));
    const double f = 4.0 * static_cast<double>(p.dim("batch") * p.dim("heads")) * s * s *
                     static_cast<double>(p.dim("head_dim"));
    return p.dim("causal") ? f / 2 : f;
  }
  double bytes(const Problem& p) const override {  // Q, K, V read and O written once; lse
    const AttentionShape s = shape_of(p);
    const double rows = static_cast<double>(s.batch * s.heads * s.seq);
    const double kv_rows = static_cast<double>(s.batch * s.kv_heads * s.seq);
    return 2.0 * static_cast<double>(element_bytes(p)) * (rows + kv_rows) * static_cast<double>(s.head_dim) +
           4.0 * rows;
  }

 private:
  Space space_;
};

}  // namespace

std::vector<Problem> attention_problem_classes() {
  // One per head dim, every dtype, both masks and grouped-query heads
  // among them; sequence lengths that are a multiple of no tile, so every
  // query and key tile set has a ragged end.
  auto problem = [](const char* dtype, std::int64_t seq, std::int64_t head_dim, std::int64_t causal) {
    return Problem{dtype, {{"batch", 1}, {"heads", 2}, {"seq", seq}, {"head_dim", head_dim}, {"causal", causal}}};
  };
  auto gqa = [](Problem p) {  // four query heads sharing two K/V heads
    p.dims["heads"] = 4;
    p.dims["kv_heads"] = 2;
    return p;
  };
  return {problem("bf16", 70, 16, 1), problem("f16", 37, 32, 0), problem("bf16", 70, 64, 0),
          gqa(problem("f16", 70, 64, 1)), problem("bf16", 37, 80, 1), problem("f16", 37, 128, 0),
          problem("bf16", 70, 128, 1), problem("f32", 37, 64, 1)};
}

void check_attention_problem(const std::string& family, const Problem& p) {
  KTUNE_REQUIRE(p.dtype == "bf16" || p.dtype == "f16" || p.dtype == "f32",
                family + ": dtype '" + p.dtype + "' is not supported; accepted: bf16, f16, f32 (Q, K, V and O "
                "of that type; f32 multiplies in tf32; fp32 scores, softmax and accumulation)");
  for (const auto& [k, v] : p.dims)
    KTUNE_REQUIRE(k == "batch" || k == "heads" || k == "kv_heads" || k == "seq" || k == "head_dim" || k == "causal",
                  family + ": unknown dimension '" + k +
                      "'; accepted: batch, heads, kv_heads (optional), seq, head_dim, causal");
  auto in_range = [&](const char* dim, std::int64_t lo, std::int64_t hi, const std::string& why) {
    KTUNE_REQUIRE(p.dims.count(dim) && p.dim(dim) >= lo && p.dim(dim) <= hi,
                  fmt::format("{}: dimension '{}' must be in {}..{}{}", family, dim, lo, hi, why));
  };
  in_range("batch", 1, kMaxGridYZ, " (the grid's z extent)");
  in_range("heads", 1, kMaxGridYZ, " (the grid's y extent)");
  if (p.dims.count("kv_heads"))
    KTUNE_REQUIRE(p.dim("kv_heads") >= 1 && p.dim("kv_heads") <= p.dim("heads") &&
                      p.dim("heads") % p.dim("kv_heads") == 0,
                  fmt::format("{}: kv_heads {} must divide heads {} (each K/V head serves heads / "
                              "kv_heads query heads)",
                              family, p.dim("kv_heads"), p.dim("heads")));
  in_range("seq", 1, kMaxSeq, "");
  in_range("causal", 0, 1, " (0: every key, 1: keys up to the query)");
  const bool known = p.dims.count("head_dim") && std::find(std::begin(kHeadDims), std::end(kHeadDims),
                                                           p.dim("head_dim")) != std::end(kHeadDims);
  KTUNE_REQUIRE(known, fmt::format("{}: head_dim {} is not supported; accepted: {}", family,
                                   p.dims.count("head_dim") ? std::to_string(p.dim("head_dim")) : "(missing)",
                                   fmt::join(kHeadDims, ", ")));
  // The largest tensors: K and V have kv_heads <= heads heads, lse and D a head_dim-th of Q's elements.
  require_elements_within(family, p, {"batch", "seq", "heads", "head_dim"}, "Q (batch, seq, heads, head_dim)");
}

float default_scale(std::int64_t head_dim) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

AttentionShape shape_of(const Problem& p) {
  AttentionShape s{p.dim("batch"), p.dim("seq"), p.dim("heads"), p.dim("head_dim"), p.dim("causal") != 0};
  if (p.dims.count("kv_heads")) s.kv_heads = p.dim("kv_heads");
  return s;
}

TensorStrides kv_strides(const AttentionShape& s) {
  AttentionShape kv = s;
  kv.heads = s.kv_heads;
  return bshd_strides(kv);
}

std::int64_t shared_bytes(const Config& c, const Problem& p) {
  return (c.at("block_m") + 2 * c.at("stages") * c.at("block_n")) * tile_row(c, p) * element_bytes(p);
}

const TypedFamily<ForwardArgs>& forward_family() {
  static const Forward f;
  return f;
}

}  // namespace ktune::templates::attention
