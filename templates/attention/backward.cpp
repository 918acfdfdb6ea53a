// The attention backward family (attention_bwd): space, constraints,
// rendering, launch plan, workspace, workload with the streaming CPU
// reference, FLOP/byte counts. Kernels: templates/attention/attention_bwd.cuh.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <tuple>
#include <utility>

#include "base/error.hpp"
#include "templates/attention/attention.hpp"
#include "templates/attention/workload_common.hpp"
#include "templates/common/family_helpers.hpp"
#include "templates/render.hpp"

namespace ktune::templates::attention {
// The forward's file has private helpers of the same names (a unity build
// compiles both in one unit): this file's are in `bwd`.
namespace bwd {
namespace {

constexpr const char* kTemplate = "attention/attention_bwd.cuh";
constexpr const char* kWgmmaTemplate = "attention/attention_bwd_wgmma.cuh";
constexpr std::int64_t kMaxTilesPerWarp = 2;  // m16 tiles of keys (dK/dV) or query rows (dQ) one warp owns
// Registers besides the tiles': indices, strides, pointers, loop state.
constexpr std::int64_t kBaseRegisters = 40;
// What ptxas saves on the sum below when P^T and dS^T are staged in shared
// memory (warp_split > 1). Fitted to ptxas 13.0's reports (nvcc -cubin
// --resource-usage) of 117 staged dK/dV kernels estimated at 240 to 520
// registers (bf16 and fp32, head dims 32 to 128, both layouts, K and V in
// registers or not; causal, dQ by atomics): at sm_90 none of the 30
// estimated up to 271 spilled, the first (4 bytes, fp32) was estimated at
// 272, and 5 of the 18 from 280 to 287 spilled up to 20 bytes. The unstaged
// sum needs no relief: of 110 unstaged kernels from 232 to 447, none up to
// 255 spilled and 4 of the 26 from 256 to 263 did.
constexpr std::int64_t kStagedRegisterRelief = 16;
// What a staged config with one stage holds more (its next step's loads are
// issued between the products): of the 16 FlashAttention-2 partitions (128
// keys, 128-query tiles, 8 warps, head_dim 64) estimated at 252 over the
// problem classes, the 3 that spilled at sm_90 with ptxas 13.0 (NVRTC, 8 to
// 56 bytes) had one stage, as 5 others did.
constexpr std::int64_t kSingleStageStagedRegisters = 4;
constexpr std::int64_t kPreprocessRows = 8;  // rows per block of the D pre-kernel (one per warp of 256 threads)

std::int64_t warp_split(const Config& c) { return c.at("warp_split"); }
/// Groups of warps in a dK/dV block, each owning its own keys.
std::int64_t key_groups(const Config& c) { return c.at("warps") / warp_split(c); }
std::int64_t tiles_per_warp(const Config& c) { return c.at("block_n") / (16 * key_groups(c)); }
/// Whether the dK/dV pass stages P^T and dS^T in shared memory (warps split a group's keys' work).
bool staged(const Config& c) { return warp_split(c) > 1; }
bool dq_atomic(const Config& c) { return c.at("dq_atomic") != 0; }
/// Staged with one stage: its next step's loads are issued between the products (kSingleStageStagedRegisters).
bool staged_single_stage(const Config& c) { return staged(c) && c.at("stages") == 1; }
bool resident_regs(const Config& c) { return c.at("resident_regs") != 0; }

/// Elements between rows of a shared-memory tile of `width`-element rows
/// (the templates' TileLayout::ROW): a spare 16-byte chunk per row when
/// padded (smem_layout 0), none when swizzled (1).
std::int64_t tile_row(std::int64_t width, const Config& c, const Problem& p) {
  return width + (c.at("smem_layout") == 0 ? 16 / element_bytes(p) : 0);
}

/// Whether a Q/dO (K/V in the dQ pass) tile's copies walk one pointer
/// (copy_registers), rather than each with an address of its own.
bool copies_walk(const Config& c, const Problem& p) {
  return copy_registers(c.at("block_m"), p, c.at("smem_layout") == 1, 32 * c.at("warps")) == 0;
}

/// Registers per thread of attention_bwd_dkdv besides kBaseRegisters (its
/// attention_bwd_dq twin holds less: half the accumulators): per m16 tile of
/// keys the warp's share (1 / warp_split) of the dK and dV accumulators
/// (head_dim) and of S^T and dP^T (block_m), and the K and V A fragments (8
/// for one k step, or 8 per k step of the head dim when they stay in
/// registers); the Q and dO B fragments (8); about 3/2 per 16-byte copy
/// of a Q/dO step (fitted: ptxas keeps as much for wide query tiles even
/// where the copies walk one pointer), and one more per copy where they do
/// not (copy_registers: each copy's address of its own); less
/// kStagedRegisterRelief when staged, plus kSingleStageStagedRegisters when
/// staged with one stage. With the last two terms, fitted to the spills of
/// `ktune compile --all` (ptxas 13.0, sm_80 and sm_90), none of the configs
/// admitted spills; the 58 they reject at sm_90 that did not spill took 241
/// to 255 registers.
std::int64_t fragment_registers(const Config& c, const Problem& p) {
  const std::int64_t d = p.dim("head_dim"), bm = c.at("block_m"), e = element_bytes(p);
  const std::int64_t copies = 2 * bm * (d * e / 16) / (32 * c.at("warps"));
  const std::int64_t k_steps = d / (e == 4 ? 8 : 16);  // of m16n8k8 (tf32) or m16n8k16
  const std::int64_t a_fragments = 8 * (resident_regs(c) ? k_steps : 1);
  return tiles_per_warp(c) * ((d + bm) / warp_split(c) + a_fragments) + 8 + 3 * copies / 2 +
         (copies_walk(c, p) ? 0 : copies) - (staged(c) ? kStagedRegisterRelief : 0) +
         (staged_single_stage(c) ? kSingleStageStagedRegisters : 0);
}

/// Why a config of the wgmma dK/dV pass (mma 1, or 2 overlapped) cannot run
/// on `d`, or "". Its registers per thread: S^T and dP^T (block_m / 2 each),
/// the dK and dV accumulators (head_dim / 2 each), P^T's and dS^T's A
/// fragments (block_m / 8 each) and 24 besides; overlapped with one
/// warpgroup, 24 more. With ptxas 13.0 (NVRTC, sm_90a) none of the configs
/// this admits over the problem classes spills (198 to 255 registers), and
/// the ones it rejects need 256 or more by this count (overlapped with one
/// warpgroup, 64-query tiles at head_dim 128 spill 4 bytes and 128-query
/// tiles 20 to 64).
std::string wgmma_invalid(const Config& c, const Problem& p, const DeviceLimits& d) {
  const std::int64_t head_dim = p.dim("head_dim"), bm = c.at("block_m"), bn = c.at("block_n");
  const std::int64_t warps = c.at("warps");
  const std::string mma = fmt::format("mma {}", c.at("mma"));
  if (std::string no = wgmma_unsupported(p, d); !no.empty()) return mma + ": " + no;
  if ((bn != 64 && bn != 128) || warps != bn / 16)
    return fmt::format("{} (wgmma): each warpgroup (4 warps) owns 64 keys, so block_n is 64 or 128 and warps "
                       "block_n / 16 (block_n {}, {} warps)",
                       mma, bn, warps);
  if (bm != 64 && bm != 128) return mma + " (wgmma): block_m is 64 or 128 (whole 64-query panels of dS^T)";
  if (warp_split(c) != 1 || c.at("smem_layout") != 1 || resident_regs(c) || !dq_atomic(c))
    return mma + " (wgmma) keeps each warpgroup's keys whole, reads its tiles in its 128-byte swizzle from shared "
                 "memory and adds dQ by atomics: warp_split 1, smem_layout 1, resident_regs 0, dq_atomic 1 or 2";
  if (c.at("pingpong") && warps != 8)
    return mma + " with pingpong 1 has two warpgroups take turns: block_n 128, 8 warps";
  const bool overlap_one_group = c.at("mma") == 2 && warps == 4;
  if (std::string no = wgmma_over_registers(24 + bm + head_dim + bm / 4 + (overlap_one_group ? 24 : 0), warps, d,
                                            overlap_one_group ? "S^T, dP^T, dK, dV, overlapped in one warpgroup"
                                                              : "S^T, dP^T, dK, dV");
      !no.empty())
    return mma + ": " + no;
  return "";
}

/// Bytes of the fp32 D rows at the head of the workspace, rounded to 16.
std::int64_t delta_bytes(const Problem& p) {
  return ceil_div(4 * p.dim("batch") * p.dim("heads") * p.dim("seq"), 16) * 16;
}
std::int64_t accumulator_bytes(const Problem& p) {
  return 4 * p.dim("batch") * p.dim("heads") * p.dim("seq") * p.dim("head_dim");
}

/// The scales of dQ's and dK's errors where dS = P (dP - D) cancels: at seq
/// 1 (P = 1, dP = D = dO.V) dQ and dK are exactly 0 and hold nothing but
/// that error, which no relative check passes. With a relative rounding r
/// of each product in dP and D, their RMS errors are r times these, so a
/// tolerance times them is an atol: tf32's products (f32 inputs) round dO
/// and V, r = sqrt(2/3) 2^-11, and its 1.5e-3 is 3.7 r; 16-bit products are
/// exact, summed in fp32, far below their 1e-2. dP_ij = dO_i.V_j and D_i =
/// dO_i.O_i are sums of head_dim products, which leave dP_ij - D_i an
/// absolute error e_i of about r sqrt(head_dim) RMS(dO_i) RMS(V) (O_i, a
/// mean of V's rows, is no larger). dQ_i = scale sum_j P_ij (dP_ij - D_i)
/// K_j then holds scale sqrt(sum_j P_ij^2) e_i RMS(K) of it per element,
/// and dK_j = scale sum_i P_ij (dP_ij - D_i) Q_i, over the (batch, seq,
/// kv_heads, head_dim) elements, the same sums with Q_i's RMS in K's place:
///   dQ: scale sqrt(d) RMS(V) RMS(K) sqrt(sum_i w_i RMS(dO_i)^2 / rows)
///   dK: scale sqrt(d) RMS(V) sqrt(sum_i w_i RMS(dO_i)^2 RMS(q_i)^2 / kv_rows)
/// with w_i = sum_j P_ij^2 (`p_squares`), in units of r. At seq 1 (w = 1)
/// dQ's is scale sqrt(d) RMS(dO) RMS(V) RMS(K). Neither grows with the
/// scores' spread (score_error_growth): P's errors are relative to dS.
/// Rows of many keys whose scores spread by sigma (w_i about e^(sigma^2) /
/// keys) get dQ and dK of that size times the spread of dP - D, about 1:
/// there the atol is about what the relative check passes already (1.1 to
/// 1.5 times at seq 70), so the check keeps its strength where dQ and dK
/// are not near 0.
std::pair<double, double> cancellation_atols(const AttentionShape& s, const std::vector<std::uint8_t>& checked,
                                             const std::vector<double>& q, const std::vector<double>& k,
                                             const std::vector<double>& v, const std::vector<double>& dout,
                                             const std::vector<double>& p_squares, double scale) {
  const std::int64_t D = s.head_dim;
  const TensorStrides st = bshd_strides(s);
  double dq_sum = 0, dk_sum = 0;
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h)
      for (std::int64_t i = 0; i < s.seq; ++i) {
        const auto row = static_cast<std::size_t>((b * s.heads + h) * s.seq + i);
        if (!checked[row]) continue;
        const std::int64_t at = b * st.batch + h * st.head + i * st.seq;
        const double w = p_squares[row] * mean_square({dout.data() + at, static_cast<std::size_t>(D)});
        dq_sum += w;
        dk_sum += w * mean_square({q.data() + at, static_cast<std::size_t>(D)});
      }
  const auto rows = static_cast<double>(s.batch * s.heads * s.seq);
  const auto kv_rows = static_cast<double>(s.batch * s.kv_heads * s.seq);
  const double rms_k = std::sqrt(mean_square(k));
  const double unit = scale * std::sqrt(static_cast<double>(D)) * std::sqrt(mean_square(v));
  return {unit * rms_k * std::sqrt(dq_sum / rows), unit * std::sqrt(dk_sum / kv_rows)};
}

/// Tiles of (block_n keys, block_m queries) the dK/dV pass keeps in shared
/// memory besides K, V, Q and dO: P^T and dS^T when staged; else dS^T (dQ
/// by atomics) unless V's fragments stay in registers and dS^T's rows
/// (block_m) are no wider than V's (head_dim), when it takes V's tile.
std::int64_t key_query_tiles(const Config& c, const Problem& p) {
  if (staged(c)) return 2;
  return dq_atomic(c) && !(resident_regs(c) && c.at("block_m") <= p.dim("head_dim")) ? 1 : 0;
}

/// dK/dV pass: K, V, the Q and dO stages, the key x query tiles and the
/// stages' fp32 lse and D of block_m queries; for dQ by bulk reductions
/// (dq_atomic 2) the dQ stage, block_m fp32 rows of head_dim + 8.
std::int64_t dkdv_shared(const Config& c, const Problem& p) {
  const std::int64_t bm = c.at("block_m"), bn = c.at("block_n"), e = element_bytes(p);
  const std::int64_t tiles = (2 * bn + 2 * c.at("stages") * bm) * tile_row(p.dim("head_dim"), c, p) * e;
  const std::int64_t dq_stage = c.at("dq_atomic") == 2 ? bm * (p.dim("head_dim") + 8) * 4 : 0;
  return tiles + key_query_tiles(c, p) * bn * tile_row(bm, c, p) * e + c.at("stages") * 2 * bm * 4 + dq_stage;
}
std::int64_t dq_shared(const Config& c, const Problem& p) {
  return (2 * c.at("block_n") + 2 * c.at("stages") * c.at("block_m")) * tile_row(p.dim("head_dim"), c, p) *
         element_bytes(p);
}

class Backward final : public TypedFamily<BackwardArgs> {
 public:
  Backward()
      : space_({{"block_m", {16, 32, 64, 128},
                 "queries per tile the dK/dV blocks walk (keys per tile of the dQ pass): fewer barriers and atomics "
                 "vs S^T/dP^T registers and shared memory"},
                {"block_n", {16, 32, 64, 128},
                 "keys per dK/dV block (query rows per dQ block): more reuse of each Q/dO tile vs accumulator "
                 "registers and fewer blocks"},
                {"warps", {1, 2, 4, 8},
                 "warps per block, block_n * warp_split / warps keys each (block_n / warps query rows in the dQ "
                 "pass): more warps vs more rows per warp"},
                {"warp_split", {1, 2, 4},
                 "warps sharing a group of keys in the dK/dV pass: 1 each warp turns its S^T and dP^T into dV and "
                 "dK in registers; 2 or 4 they split the query tile's columns of S^T, dP^T and the head dim's of dK, "
                 "dV (FlashAttention-2's partition), staging P^T and dS^T in shared memory: wider tiles in the same "
                 "registers vs a round trip through shared memory"},
                {"stages", {1, 2, 4},
                 "Q/dO (K/V) tiles in flight: load latency hidden (narrow query tiles make short steps) vs shared "
                 "memory"},
                {"smem_layout", {0, 1},
                 "shared-memory rows of the K, V, Q, dO and dS^T tiles: 0 padded by 16 bytes (conflict-free, more "
                 "memory), 1 XOR-swizzled (packed; conflict-free when a row is a multiple of 128 bytes)"},
                {"resident_regs", {0, 1},
                 "the block's resident operand (K and V in the dK/dV pass, Q and dO in the dQ pass): 1 its A "
                 "fragments loaded once into registers (and dS^T, for dQ by atomics, in V's tile when block_m <= "
                 "head_dim and warp_split is 1), 0 re-read from shared memory at every step: ldmatrix traffic and "
                 "shared memory vs 8 registers per k step of the head dim and m16 tile"},
                {"dq_atomic", {0, 1, 2},
                 "dQ by fp32 atomics from the dK/dV pass (a workspace accumulator, last bits vary: 1 each thread "
                 "its fragment's pairs, 2 the wgmma pass's tile staged in shared memory and added a row at a time "
                 "by bulk reductions, whole lines, sm_90) or by a second pass that recomputes P and dP (0: no "
                 "atomics, twice the Q K^T and dO V^T products)"},
                {"mma", {0, 1, 2},
                 "matrix instructions of the dK/dV pass: 0 mma.sync by each warp (sm_80 on), 1 wgmma by each "
                 "warpgroup of 4 warps, 64 keys each (sm_90's arch-specific target sm_90a: S^T and dP^T from shared "
                 "memory, dV and dK with P^T and dS^T in registers, dQ from dS^T staged; 16-bit inputs, head dims 64 "
                 "and 128), 2 wgmma as 1 with P^T's exponentials beside dP^T's product and dS^T's arithmetic beside "
                 "dV's"},
                {"tile_order", {0, 1},
                 "the order blocks start in, a kernel argument: 0 each head's key blocks (query blocks of the dQ "
                 "pass) together, its longest first; 1 the longest of every head first, the shortest at the end "
                 "(causal masks only)"},
                {"pingpong", {0, 1},
                 "with the wgmma dK/dV pass (mma 1 or 2) over two warpgroups: 1 they issue their products in "
                 "turns (named barriers), one's exponentials and dS^T arithmetic beside the other's products, "
                 "where 0 issues both together and leaves the tensor cores idle while both compute"}}) {}

  std::string name() const override { return "attention_bwd"; }
  std::string summary() const override {
    return "attention backward (FlashAttention-2 style; mma.sync, or wgmma on sm_90): dQ, dK, dV from O, dO and the "
           "lse; dQ by atomics or a second pass";
  }
  std::vector<std::string> source_files() const override { return {kTemplate, kWgmmaTemplate}; }
  const Space& space() const override { return space_; }
  std::vector<Problem> problem_classes() const override { return attention_problem_classes(); }
  void check_problem(const Problem& p) const override { check_attention_problem(name(), p); }

  Config default_config(const Problem& p) const override {
    // dQ by atomics. On a grid of at least kBusyGrid blocks of 128 keys,
    // 16-bit inputs up to head_dim 64 take FlashAttention-2's partition: 128
    // keys over 4 groups of 2 warps that split S^T and dK, dV (P^T and dS^T
    // staged in shared memory), 64-query tiles, rows swizzled, K and V
    // fragments resident in registers. The CS336 leaderboard's backward
    // tuned on an H200 for 120 s (126 configs): this config 5.68 ms, with
    // 4 stages (the session's winner, a candidate: 133 KB of shared memory,
    // over the 99 KB of an sm_86 or sm_89 block) 5.64 ms, the previous
    // default (128 keys over 4 warps, 16-query tiles, the second below)
    // 5.89 ms.
    // Otherwise Q/dO tiles double-buffered in padded rows, K and V re-read
    // from shared memory, one group of keys per warp: 128 keys over 4 warps
    // with 16-query tiles on that busy grid (the only query tile the
    // register estimate allows there), else 64 keys over 4 warps (one m16
    // tile each) and the widest query tile of 64, 32 or 16 within the
    // register estimate (head_dim 128 takes 32), then narrower blocks.
    check_problem(p);
    const DeviceLimits any = DeviceLimits::for_arch("sm_80");
    const Config plain({{"warp_split", 1}, {"stages", 2}, {"smem_layout", 0}, {"resident_regs", 0}, {"dq_atomic", 1},
                        {"mma", 0}, {"tile_order", 0}, {"pingpong", 0}});
    if (element_bytes(p) == 2 && p.dim("head_dim") <= 64 && blocks_of_128(p) >= kBusyGrid)
      for (const Config& c : {with(plain, {{"block_m", 64}, {"block_n", 128}, {"warps", 8}, {"warp_split", 2},
                                           {"smem_layout", 1}, {"resident_regs", 1}}),
                              with(plain, {{"block_m", 16}, {"block_n", 128}, {"warps", 4}})})
        if (is_valid(c, p, any, nullptr)) return c;
    for (const auto& [bn, warps] : {std::pair{64, 4}, std::pair{32, 2}, std::pair{16, 1}})
      for (const std::int64_t bm : {64, 32, 16}) {
        const Config c = with(plain, {{"block_m", bm}, {"block_n", bn}, {"warps", warps}});
        if (is_valid(c, p, any, nullptr)) return c;
      }
    throw_error(ErrorKind::kInternal, "attention_bwd: no valid default config for " + p.key());
  }

  std::optional<Config> arch_default(const Problem& p, const DeviceLimits&) const override {
    // Where the wgmma dK/dV pass runs (sm_90), 16-bit inputs at head_dim 64
    // on a grid of at least kBusyGrid blocks of 128 keys take it: 128 keys
    // over two warpgroups, 128-query tiles, rows swizzled, dQ by atomics.
    // The CS336 leaderboard's backward on an H200
    // (bench/results/h200-2026-11-27-wgmma.md): 4.395 ms, the winner of an
    // 80 s tuning session (63 configs), against 4.802 ms at 64-query tiles
    // and 5.690 ms for default_config.
    if (element_bytes(p) != 2 || p.dim("head_dim") != 64 || blocks_of_128(p) < kBusyGrid) return std::nullopt;
    return Config({{"block_m", 128}, {"block_n", 128}, {"warps", 8}, {"warp_split", 1}, {"stages", 2},
                   {"smem_layout", 1}, {"resident_regs", 0}, {"dq_atomic", 1}, {"mma", 1}, {"tile_order", 0},
                   {"pingpong", 0}});
  }

  std::vector<Config> candidates(const Problem& p) const override {
    // The default with 4 stages (3 steps' loads in flight), and
    // FlashAttention-2's partition: 128 keys over 4 groups of 2 warps that
    // split S^T and dK, dV (P^T and dS^T staged in shared memory), at 128-
    // query tiles (2 stages, K and V re-read: their shared memory and
    // registers fit no more) and 64-query tiles; on the busy grid of 16-bit
    // inputs up to head_dim 64, also the previous default there (128 keys
    // over 4 warps, 16-query tiles, padded rows). The default itself left
    // out. First, for 16-bit inputs at head dims 64 and 128, the wgmma
    // dK/dV pass (valid on sm_90 alone), under a causal mask with the
    // longest blocks of every head first (tile_order 1), 128 keys over two
    // warpgroups: at head_dim 64 with 128-query tiles (sm_90's default shape
    // there) in turn and overlapped (mma 2), each also with the warpgroups
    // taking turns (pingpong), then with dQ by bulk reductions (dq_atomic 2)
    // overlapped and in turn; at 64-query tiles overlapped, with ping-pong,
    // with bulk reductions; then in turn (mma 1), 64-query tiles, 128 keys
    // over two warpgroups and 64 over one. Then, under a causal mask, the
    // default with the longest blocks first. For a short sequence (at most
    // four of the default's query tiles, as the model's contexts of 256,
    // where a block walks a few tiles and waits on each one's loads) the
    // default with 4 stages, every query tile of a head in flight, comes
    // before all these.
    const Config def = default_config(p);
    const std::int64_t order = p.dim("causal");
    const bool short_seq = p.dim("seq") <= 4 * def.at("block_m");
    std::vector<Config> out;
    if (short_seq) out.push_back(with(def, {{"stages", 4}}));
    if (element_bytes(p) == 2 && (p.dim("head_dim") == 64 || p.dim("head_dim") == 128)) {
      const auto wgmma = [&](std::int64_t bm, std::int64_t bn, std::int64_t mma, std::int64_t dq = 1,
                             std::int64_t pingpong = 0) {
        return Config({{"block_m", bm}, {"block_n", bn}, {"warps", bn / 16}, {"warp_split", 1}, {"stages", 2},
                       {"smem_layout", 1}, {"resident_regs", 0}, {"dq_atomic", dq}, {"mma", mma},
                       {"tile_order", order}, {"pingpong", pingpong}});
      };
      if (p.dim("head_dim") == 64)
        for (const Config& c : {wgmma(128, 128, 1), wgmma(128, 128, 1, 1, 1), wgmma(128, 128, 2),
                                wgmma(128, 128, 2, 1, 1), wgmma(128, 128, 2, 2), wgmma(128, 128, 1, 2)})
          out.push_back(c);
      for (const Config& c : {wgmma(64, 128, 2), wgmma(64, 128, 2, 1, 1), wgmma(64, 128, 2, 2), wgmma(64, 128, 1),
                              wgmma(64, 64, 1)})
        out.push_back(c);
    }
    if (order == 1) out.push_back(with(def, {{"tile_order", 1}}));
    if (!short_seq) out.push_back(with(def, {{"stages", 4}}));
    for (const Config& c : {with(def, {{"block_m", 128}, {"block_n", 128}, {"warps", 8}, {"warp_split", 2},
                                       {"stages", 2}, {"resident_regs", 0}}),
                            with(def, {{"block_m", 64}, {"block_n", 128}, {"warps", 8}, {"warp_split", 2}})})
      out.push_back(c);
    if (element_bytes(p) == 2 && p.dim("head_dim") <= 64 && blocks_of_128(p) >= kBusyGrid)
      out.push_back(Config({{"block_m", 16}, {"block_n", 128}, {"warps", 4}, {"warp_split", 1}, {"stages", 2},
                            {"smem_layout", 0}, {"resident_regs", 0}, {"dq_atomic", 1}, {"mma", 0},
                            {"tile_order", 0}, {"pingpong", 0}}));
    std::erase(out, def);
    return out;
  }

  bool is_valid(const Config& c, const Problem& p, const DeviceLimits& d, std::string* why) const override {
    const std::int64_t bm = c.at("block_m"), bn = c.at("block_n"), warps = c.at("warps");
    const std::int64_t threads = 32 * warps;
    if (threads > d.max_threads_per_block) return reject(why, "threads exceed the device's block limit");
    if (c.at("tile_order") == 1 && p.dim("causal") == 0)
      return reject(why, "tile_order 1 orders blocks of unequal work; without a causal mask every block has the same");
    if (c.at("mma") != 0) {
      if (const std::string no = wgmma_invalid(c, p, d); !no.empty()) return reject(why, no);
      return fits_shared(c, p, d, why);
    }
    if (c.at("dq_atomic") == 2)
      return reject(why, "dq_atomic 2 (dQ's rows by bulk reductions) is the wgmma pass's (mma 1 or 2): with mma.sync "
                         "dQ is added by atomics (1) or a second pass (0)");
    if (c.at("pingpong")) return reject(why, "pingpong 1 has the wgmma pass's warpgroups take turns (mma 1 or 2)");
    const std::int64_t split = warp_split(c), d_head = p.dim("head_dim");
    if (warps % split != 0)
      return reject(why, fmt::format("warp_split {} does not divide the block's {} warps into whole groups", split,
                                     warps));
    if (bn % (16 * key_groups(c)) != 0)
      return reject(why, fmt::format("each group of warp_split warps owns whole 16-row tiles of the block's keys: "
                                     "block_n {} is not a multiple of 16 x {} groups",
                                     bn, key_groups(c)));
    if (!dq_atomic(c) && bn % (16 * warps) != 0)
      return reject(why, fmt::format("each warp of the dQ pass owns whole 16-row tiles of its query rows: block_n {} "
                                     "is not a multiple of 16 x {} warps",
                                     bn, warps));
    if (bm % (16 * split) != 0 || d_head % (16 * split) != 0)
      return reject(why, fmt::format("each of warp_split {} warps takes whole 16-column pieces of the query tile "
                                     "(block_m {}) and of the head dim ({})",
                                     split, bm, d_head));
    if (tiles_per_warp(c) > kMaxTilesPerWarp)
      return reject(why, fmt::format("each warp would own {} keys; at most {} (their dK and dV accumulators live in "
                                     "registers): add warps or lower block_n",
                                     bn / key_groups(c), 16 * kMaxTilesPerWarp));
    const std::int64_t registers = kBaseRegisters + fragment_registers(c, p);
    const std::int64_t budget = std::min<std::int64_t>(d.max_regs_per_thread, d.regs_per_sm / threads);
    if (registers > budget)
      return reject(why, fmt::format("each thread would need about {} registers for its dK and dV accumulators, "
                                     "S^T and dP^T tiles, fragments{} and copies{} (head_dim {}, {} keys per warp, "
                                     "{}-query tiles, split {} ways{}), over the {} a block of {} threads allows: "
                                     "it would spill",
                                     registers, resident_regs(c) ? " (K and V's kept for every k step)" : "",
                                     copies_walk(c, p) ? "" : " (each at an address of its own)", d_head,
                                     bn / key_groups(c), bm, split,
                                     staged_single_stage(c) ? ", one stage" : "", budget, threads));
    return fits_shared(c, p, d, why);
  }

  /// Whether the passes' tiles fit a block's shared memory.
  static bool fits_shared(const Config& c, const Problem& p, const DeviceLimits& d, std::string* why) {
    const std::int64_t smem = backward_shared_bytes(c, p);
    if (smem > d.max_smem_per_block)
      return reject(why, fmt::format("needs {} bytes of shared memory (K and V tiles, {} stages of Q and dO tiles "
                                     "with their lse and D{}{}, in {} rows), over the {} bytes a block of {} may use",
                                     smem, c.at("stages"),
                                     staged(c) ? ", P^T and dS^T" : key_query_tiles(c, p) ? ", dS^T" : "",
                                     c.at("dq_atomic") == 2 ? ", the dQ stage" : "",
                                     c.at("smem_layout") == 0 ? "padded" : "swizzled", d.max_smem_per_block,
                                     d.arch));
    return true;
  }

  Rendered render(const Config& c, const Problem& p) const override {
    const std::int64_t d = p.dim("head_dim");
    const char* t = element_type(p);
    const char* causal = p.dim("causal") ? "true" : "false";
    const char* atomic = dq_atomic(c) ? "true" : "false";
    const char* resident = resident_regs(c) ? "true" : "false";
    if (c.at("mma") != 0) {  // dQ by atomics (is_valid): the pre-kernel, the wgmma dK/dV pass, the conversion
      Rendered r = render_template(
          kWgmmaTemplate,
          {fmt::format("attention::attention_bwd_preprocess<{}, true, {}>", d, t),
           fmt::format("attention::attention_bwd_dkdv_wgmma<{}, {}, {}, {}, {}, {}, {}, {}, {}, {}>", d,
                       c.at("block_m"), c.at("block_n"), c.at("warps") / 4, c.at("stages"),
                       c.at("mma") == 2 ? "true" : "false", c.at("dq_atomic") == 2 ? "true" : "false",
                       c.at("pingpong") ? "true" : "false", causal, t),
           fmt::format("attention::attention_bwd_dq_convert<{}, {}>", d, t)},
          name());
      r.arch_specific = true;
      return r;
    }
    std::vector<std::string> kernels = {
        fmt::format("attention::attention_bwd_preprocess<{}, {}, {}>", d, atomic, t),
        fmt::format("attention::attention_bwd_dkdv<{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}>", d, c.at("block_m"),
                    c.at("block_n"), c.at("warps"), warp_split(c), c.at("stages"), c.at("smem_layout"), resident,
                    atomic, causal, t)};
    if (dq_atomic(c))
      kernels.push_back(fmt::format("attention::attention_bwd_dq_convert<{}, {}>", d, t));
    else
      kernels.push_back(fmt::format("attention::attention_bwd_dq<{}, {}, {}, {}, {}, {}, {}, {}, {}>", d,
                                    c.at("block_m"), c.at("block_n"), c.at("warps"), c.at("stages"),
                                    c.at("smem_layout"), resident, causal, t));
    return render_template(kTemplate, std::move(kernels), name());
  }

  std::vector<BufferShape> buffer_shapes(const Problem& p) const override {
    check_problem(p);
    const AttentionShape s = shape_of(p);
    const std::int64_t n = s.batch * s.seq * s.heads * s.head_dim, kv_n = n / (s.heads / s.kv_heads);
    const DType e = element_dtype(p);
    return {buffer_shape("q", Role::kInput, e, n),
            buffer_shape("k", Role::kInput, e, kv_n),
            buffer_shape("v", Role::kInput, e, kv_n),
            buffer_shape("o", Role::kInput, e, n),
            buffer_shape("lse", Role::kInput, DType::kF32, s.batch * s.heads * s.seq),
            buffer_shape("do", Role::kInput, e, n),
            buffer_shape("dq", Role::kOutput, e, n),
            buffer_shape("dk", Role::kOutput, e, kv_n),
            buffer_shape("dv", Role::kOutput, e, kv_n),
            buffer_shape("scratch", Role::kScratch, DType::kF32, (delta_bytes(p) + accumulator_bytes(p)) / 4)};
  }

  Workload make_workload(const Problem& p, std::uint64_t seed) const override { return make_workload(p, seed, {}); }
  Workload make_workload(const Problem& p, std::uint64_t seed, const Scalars& given) const override {
    check_problem(p);
    const double scale = args_with_scalars(p, given).scale;
    const AttentionShape s = shape_of(p);
    const auto n = static_cast<std::size_t>(s.batch * s.seq * s.heads * s.head_dim);
    const auto rows = static_cast<std::size_t>(s.batch * s.heads * s.seq);
    const std::size_t kv_n = n / static_cast<std::size_t>(s.heads / s.kv_heads);
    // Q, K, V as the forward's workload draws them; dO in [-1, 1). Past the
    // reference budget, rows outside a seeded sample get q = 0 and dO = 0
    // (sample_rows): exact O and lse, nothing added to dQ, dK, dV. Timed
    // runs take q and dO as drawn.
    std::mt19937_64 rng(seed);
    auto q = draw_stored(p, rng, n, -2.f, 2.f);
    const auto k = draw_stored(p, rng, kv_n, -2.f, 2.f), v = draw_stored(p, rng, kv_n, -1.f, 1.f);
    auto dout = draw_stored(p, rng, n, -1.f, 1.f);
    // Forward (2), backward (4) and softmax_square_sums' (1) multiply-adds per key.
    const auto checked = sample_rows(s, seed, 7.0);
    const bool sample = is_sample(checked);
    std::vector<std::byte> q_timed, do_timed;
    if (sample) {
      q_timed = element_buffer("q", Role::kInput, p, q).bytes;
      do_timed = element_buffer("do", Role::kInput, p, dout).bytes;
    }
    zero_unchecked(s, checked, {&q, &dout});
    const TensorStrides st = bshd_strides(s), kv_st = kv_strides(s);
    std::vector<double> o(n), lse(rows);
    attention_forward_streaming<double>(q.data(), k.data(), v.data(), o.data(), lse.data(), s, st, kv_st, kv_st, st,
                                        scale, 0, s.batch * s.heads, checked.data());
    fill_unchecked(s, checked, v, o, lse);
    const std::vector<double> p_squares = softmax_square_sums(s, checked, q, k, lse, scale);
    // The backward reads O and lse as the forward leaves them: O rounded to
    // the dtype, lse to fp32.
    for (auto& x : o) x = stored(p, x);
    for (auto& x : lse) x = static_cast<float>(x);
    std::vector<double> dq(n), dk(kv_n), dv(kv_n);
    attention_backward_streaming<double>(q.data(), k.data(), v.data(), o.data(), lse.data(), dout.data(), dq.data(),
                                         dk.data(), dv.data(), s, st, kv_st, scale, 0, s.batch * s.kv_heads,
                                         checked.data());
    Workload w;
    w.buffers.push_back(element_buffer("q", Role::kInput, p, q));
    w.buffers.back().timed = std::move(q_timed);
    w.buffers.push_back(element_buffer("k", Role::kInput, p, k));
    w.buffers.push_back(element_buffer("v", Role::kInput, p, v));
    w.buffers.push_back(element_buffer("o", Role::kInput, p, o));
    w.buffers.push_back(make_buffer("lse", Role::kInput, DType::kF32, std::vector<float>(lse.begin(), lse.end())));
    w.buffers.push_back(element_buffer("do", Role::kInput, p, dout));
    w.buffers.back().timed = std::move(do_timed);
    const double tolerance = backward_tolerance(p) * score_error_growth(p, scale);
    const auto [dq_atol, dk_atol] = cancellation_atols(s, checked, q, k, v, dout, p_squares, scale);
    for (auto [label, values, atol] :
         {std::tuple{"dq", &dq, dq_atol}, std::tuple{"dk", &dk, dk_atol}, std::tuple{"dv", &dv, 0.0}}) {
      HostBuffer out = element_buffer(label, Role::kOutput, p, std::vector<double>(values->size()));
      out.expected = element_buffer(label, Role::kOutput, p, *values).bytes;
      out.tolerance = tolerance;
      out.atol = backward_tolerance(p) * atol;
      w.buffers.push_back(std::move(out));
    }
    // The workspace of every config: D, then the dQ accumulator.
    w.buffers.push_back(make_buffer("scratch", Role::kScratch, DType::kF32,
                                    std::vector<float>(static_cast<std::size_t>(
                                        (delta_bytes(p) + accumulator_bytes(p)) / 4))));
    return w;
  }

  BackwardArgs args_of(const Problem& p, const std::vector<std::uint64_t>& a) const override {
    require_addresses(name(), a, {"q", "k", "v", "o", "lse", "do", "dq", "dk", "dv", "scratch"});
    const AttentionShape s = shape_of(p);
    const TensorStrides st = bshd_strides(s), kv_st = kv_strides(s);
    return BackwardArgs{.q = a[0], .k = a[1], .v = a[2], .o = a[3], .lse = a[4], .dout = a[5], .dq = a[6],
                        .dk = a[7], .dv = a[8], .workspace = a[9], .q_strides = st, .k_strides = kv_st,
                        .v_strides = kv_st, .o_strides = st, .do_strides = st, .dq_strides = st, .dk_strides = kv_st,
                        .dv_strides = kv_st, .scale = default_scale(p.dim("head_dim"))};
  }

  /// D rows (fp32), and the fp32 dQ accumulator when dQ goes by atomics.
  bool deterministic(const Config& c) const override { return !dq_atomic(c); }
  std::size_t workspace_bytes(const Config& c, const Problem& p) const override {
    return static_cast<std::size_t>(delta_bytes(p) + (dq_atomic(c) ? accumulator_bytes(p) : 0));
  }

  /// The forward's softmax scale: 1/sqrt(head_dim), the usual one.
  Scalars scalars(const Problem& p) const override { return {{"scale", shortest(default_scale(p.dim("head_dim")))}}; }
  void set_scalars(BackwardArgs& args, const Problem&, const Scalars& s) const override {
    KTUNE_REQUIRE(s.at("scale") > 0, fmt::format("{}: the softmax scale must be positive, got {:g}", name(),
                                                 s.at("scale")));
    args.scale = f32_scalar(name(), "scale", s.at("scale"));
  }

  using TypedFamily<BackwardArgs>::plan;
  std::vector<Launch> plan(const Config& c, const Problem& p, const BackwardArgs& a,
                           const DeviceLimits&) const override {
    check_problem(p);
    const std::int64_t e = element_bytes(p);
    for (const auto& [buffer, address] : {std::pair{"q", a.q}, std::pair{"k", a.k}, std::pair{"v", a.v},
                                          std::pair{"o", a.o}, std::pair{"do", a.dout}, std::pair{"dq", a.dq},
                                          std::pair{"dk", a.dk}, std::pair{"dv", a.dv}})
      require_aligned(name(), buffer, address, 16);
    require_aligned(name(), "lse", a.lse, 4);
    KTUNE_REQUIRE(a.workspace != 0, fmt::format("attention_bwd: no workspace given; the config needs {} bytes "
                                                "(workspace_bytes)",
                                                workspace_bytes(c, p)));
    require_aligned(name(), "workspace", a.workspace, 16);
    for (const auto& [buffer, strides] :
         {std::pair{"q", a.q_strides}, std::pair{"k", a.k_strides}, std::pair{"v", a.v_strides},
          std::pair{"o", a.o_strides}, std::pair{"do", a.do_strides}, std::pair{"dq", a.dq_strides},
          std::pair{"dk", a.dk_strides}, std::pair{"dv", a.dv_strides}})
      require_strides(name(), buffer, strides, e);
    KTUNE_REQUIRE(std::isfinite(a.scale) && a.scale > 0,
                  fmt::format("attention_bwd: the softmax scale must be positive and finite, got {}", a.scale));
    const AttentionShape s = shape_of(p);
    const auto seq = static_cast<int>(s.seq), heads = static_cast<int>(s.heads);
    const auto group = static_cast<int>(s.heads / s.kv_heads);
    const std::uint64_t delta = a.workspace, accum = a.workspace + static_cast<std::uint64_t>(delta_bytes(p));
    const auto threads = static_cast<unsigned>(32 * c.at("warps"));
    std::vector<Launch> launches(3);
    Launch& pre = launches[0];
    pre.kernel = 0;
    pre.grid = {static_cast<unsigned>(ceil_div(s.seq, kPreprocessRows)), static_cast<unsigned>(s.heads),
                static_cast<unsigned>(s.batch)};
    pre.block = {32 * kPreprocessRows, 1, 1};
    pre.args.add(a.o).add(a.dout).add(delta).add(accum).add(a.o_strides).add(a.do_strides).add(seq).add(heads);
    Launch& kv = launches[1];
    kv.kernel = 1;
    kv.grid = {static_cast<unsigned>(ceil_div(s.seq, c.at("block_n"))), static_cast<unsigned>(s.kv_heads),
               static_cast<unsigned>(s.batch)};
    kv.block = {threads, 1, 1};
    kv.dynamic_smem = static_cast<unsigned>(dkdv_shared(c, p));
    kv.args.add(a.q).add(a.k).add(a.v).add(a.dout).add(a.lse).add(delta).add(accum).add(a.dk).add(a.dv);
    kv.args.add(a.q_strides).add(a.k_strides).add(a.v_strides).add(a.do_strides).add(a.dk_strides).add(a.dv_strides);
    kv.args.add(seq).add(heads).add(group).add(a.scale).add(static_cast<int>(c.at("tile_order")));
    Launch& dq = launches[2];
    dq.kernel = 2;
    if (dq_atomic(c)) {
      dq.grid = {static_cast<unsigned>(ceil_div(s.seq * s.head_dim, 512)), static_cast<unsigned>(s.heads),
                 static_cast<unsigned>(s.batch)};
      dq.block = {256, 1, 1};
      dq.args.add(accum).add(a.dq).add(a.dq_strides).add(seq).add(heads).add(a.scale);
    } else {
      dq.grid = {static_cast<unsigned>(ceil_div(s.seq, c.at("block_n"))), static_cast<unsigned>(s.heads),
                 static_cast<unsigned>(s.batch)};
      dq.block = {threads, 1, 1};
      dq.dynamic_smem = static_cast<unsigned>(dq_shared(c, p));
      dq.args.add(a.q).add(a.k).add(a.v).add(a.dout).add(a.lse).add(delta).add(a.dq);
      dq.args.add(a.q_strides).add(a.k_strides).add(a.v_strides).add(a.do_strides).add(a.dq_strides);
      dq.args.add(seq).add(heads).add(group).add(a.scale).add(static_cast<int>(c.at("tile_order")));
    }
    return launches;
  }

  double flops(const Problem& p) const override {  // 2.5 x the forward's (the convention of the benchmarks)
    return 2.5 * forward_family().flops(p);
  }
  double bytes(const Problem& p) const override {  // Q, K, V, O, dO read, dQ, dK, dV written; lse and D
    const AttentionShape s = shape_of(p);
    const double rows = static_cast<double>(s.batch * s.heads * s.seq);
    const double kv_rows = static_cast<double>(s.batch * s.kv_heads * s.seq);
    return static_cast<double>(element_bytes(p) * s.head_dim) * (4.0 * rows + 4.0 * kv_rows) + 8.0 * rows;
  }

 private:
  Space space_;
};

}  // namespace
}  // namespace bwd

double backward_tolerance(const Problem& p) {
  // See attention.hpp: a bound from the roundings on the way, not a fit.
  return is_tf32(p) ? kTf32BackwardTolerance : tolerance_for(p.dtype);
}

std::int64_t backward_shared_bytes(const Config& c, const Problem& p) {
  return std::max(bwd::dkdv_shared(c, p), bwd::dq_atomic(c) ? std::int64_t{0} : bwd::dq_shared(c, p));
}

const TypedFamily<BackwardArgs>& backward_family() {
  static const bwd::Backward f;
  return f;
}

}  // namespace ktune::templates::attention
