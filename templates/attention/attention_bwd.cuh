// Attention backward kernels, FlashAttention-2 style on mma.sync (reference:
// attention_backward_streaming in templates/attention/reference.hpp). From
// Q, K, V, O, dO and the forward's row log-sum-exp (fp32), per (batch, head):
//   P = exp(scale * Q K^T - lse)     recomputed tile by tile, never stored
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - D),  D = rowsum(dO * O)
//   dQ = scale * dS K,  dK = scale * dS^T Q
// Kernels, in launch order:
//   attention_bwd_preprocess  D (fp32, (batch, heads, seq)) and, when dQ goes
//                             by atomics, a zeroed fp32 dQ accumulator
//   attention_bwd_dkdv        dK and dV of BLOCK_N keys of one K/V head,
//                             walking the query tiles of every query head
//                             that reads it (grouped-query heads summed in
//                             registers); with DQ_ATOMIC it also adds its
//                             part of dQ into the fp32 accumulator
//   attention_bwd_dq_convert  (DQ_ATOMIC) dQ = scale * accumulator, to T
//   attention_bwd_dq          (second pass, no atomics) dQ of BLOCK_N query
//                             rows, walking the key tiles, recomputing P and dP
// Under a causal mask, tiles wholly above the diagonal are skipped, tiles
// that cross it (or the sequence's end) are masked, interior tiles are not.
// bf16/f16 multiply with mma.sync m16n8k16, f32 with m16n8k8 in tf32; P and
// dS are rounded to T (tf32) as they enter the matrix units; every
// accumulator, P, dP, dS and D are fp32.
//
// Shared memory (dynamic): tiles laid out by TileLayout<., LAYOUT> (0
// padded rows, 1 XOR-swizzled chunks; attention_common.cuh), HEAD_DIM-wide
// rows but for P^T and dS^T. attention_bwd_dkdv: the K and V tiles
// (BLOCK_N rows each), STAGES x (Q, dO) tiles of BLOCK_M rows, STAGES x
// (lse, D) of BLOCK_M queries (fp32, arriving with their Q and dO tiles)
// and, with DQ_ATOMIC or WARP_SPLIT > 1, dS^T (BLOCK_N rows of BLOCK_M; in
// V's tile when V stays in registers, below, BLOCK_M <= HEAD_DIM and
// WARP_SPLIT is 1), with WARP_SPLIT > 1 P^T after it; attention_bwd_dq: the
// Q and dO tiles (BLOCK_N rows) and STAGES x (K, V) tiles of BLOCK_M rows.
//
// The block's resident operand (K and V in attention_bwd_dkdv, Q and dO in
// attention_bwd_dq) is read as A fragments of the warp's own rows at every
// step; with RESIDENT_REGS those fragments are loaded once, at the first
// step, and kept in registers (8 x HEAD_DIM / Mma<T>::K per m16 tile of the
// warp), which saves their ldmatrix traffic for the rest of the walk.
#pragma once
#include "attention/attention_common.cuh"

namespace attention {

/// Fragment loads from shared-memory tiles laid out by Layout, for the
/// warp's mma (Mma<T>::K columns of k per step). 16-bit types use ldmatrix;
/// float (tf32) plain loads, rounded to tf32.
template <class Layout, class T>
struct Frag {
  static constexpr bool TF32 = sizeof(T) == 4;
  /// A (m16 x k) of rows [row0, row0 + 16), columns [k0, k0 + K) of a tile stored (row, k).
  KT_DEVICE static void a(unsigned f[4], const T* tile, int row0, int k0) {
    const int lane = static_cast<int>(kt::lane_id());
    if constexpr (TF32) {
      const int g = lane / 4, t = lane % 4;
      f[0] = kt::float_to_tf32(tile[Layout::offset(row0 + g, k0 + t)]);
      f[1] = kt::float_to_tf32(tile[Layout::offset(row0 + g + 8, k0 + t)]);
      f[2] = kt::float_to_tf32(tile[Layout::offset(row0 + g, k0 + t + 4)]);
      f[3] = kt::float_to_tf32(tile[Layout::offset(row0 + g + 8, k0 + t + 4)]);
    } else {
      kt::ldmatrix_x4(f, tile + Layout::offset(row0, lane % 8 + 8 * (lane / 8 % 2), k0 + 8 * (lane / 16)));
    }
  }
  /// A (m16 x k) of a tile stored transposed, (k, row): A[m][k] = tile[k0 + k][row0 + m].
  KT_DEVICE static void a_trans(unsigned f[4], const T* tile, int row0, int k0) {
    const int lane = static_cast<int>(kt::lane_id());
    if constexpr (TF32) {
      const int g = lane / 4, t = lane % 4;
      f[0] = kt::float_to_tf32(tile[Layout::offset(k0 + t, row0 + g)]);
      f[1] = kt::float_to_tf32(tile[Layout::offset(k0 + t, row0 + g + 8)]);
      f[2] = kt::float_to_tf32(tile[Layout::offset(k0 + t + 4, row0 + g)]);
      f[3] = kt::float_to_tf32(tile[Layout::offset(k0 + t + 4, row0 + g + 8)]);
    } else {
      kt::ldmatrix_x4_trans(f, tile + Layout::offset(k0, lane % 8 + 8 * (lane / 16), row0 + 8 * (lane / 8 % 2)));
    }
  }
  /// B of two n8 tiles (f[0..1]: n0 .. n0 + 7, f[2..3]: n0 + 8 .. n0 + 15) of a
  /// tile stored (n, k): B[k][n] = tile[n0 + n][k0 + k] (Q K^T's K).
  KT_DEVICE static void b_pair(unsigned f[4], const T* tile, int n0, int k0) {
    const int lane = static_cast<int>(kt::lane_id());
    if constexpr (TF32) {
      const int g = lane / 4, t = lane % 4;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        f[2 * half] = kt::float_to_tf32(tile[Layout::offset(n0 + half * 8 + g, k0 + t)]);
        f[2 * half + 1] = kt::float_to_tf32(tile[Layout::offset(n0 + half * 8 + g, k0 + t + 4)]);
      }
    } else {
      kt::ldmatrix_x4(f, tile + Layout::offset(n0, lane % 8 + 8 * (lane / 16), k0 + 8 * (lane / 8 % 2)));
    }
  }
  /// B of two n8 tiles of a tile stored (k, n): B[k][n] = tile[k0 + k][n0 + n]
  /// (P V's V). PERMUTED (tf32 only) pairs it with an A made by acc_to_a,
  /// whose k = t and t + 4 are the accumulator's columns 2t and 2t + 1.
  template <bool PERMUTED>
  KT_DEVICE static void b_trans_pair(unsigned f[4], const T* tile, int k0, int n0) {
    const int lane = static_cast<int>(kt::lane_id());
    if constexpr (TF32) {
      const int g = lane / 4, t = lane % 4;
      const int k_lo = PERMUTED ? 2 * t : t, k_hi = PERMUTED ? 2 * t + 1 : t + 4;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        f[2 * half] = kt::float_to_tf32(tile[Layout::offset(k0 + k_lo, n0 + half * 8 + g)]);
        f[2 * half + 1] = kt::float_to_tf32(tile[Layout::offset(k0 + k_hi, n0 + half * 8 + g)]);
      }
    } else {
      kt::ldmatrix_x4_trans(f, tile + Layout::offset(k0, lane % 8 + 8 * (lane / 8 % 2), n0 + 8 * (lane / 16)));
    }
  }
};

/// Stores rows of an m16 x (8 DT) fp32 accumulator (n8 tiles c[.]) times
/// `factor` as T, rows at or past `seq` left alone.
template <int DT, class T>
KT_DEVICE void store_rows(T* base, long long row_stride, int row0, int seq, const float (&c)[DT][4], float factor) {
  const int lane = static_cast<int>(kt::lane_id()), g = lane / 4, t = lane % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + g + 8 * r;
    if (row < seq) {
      T* dst = base + row * row_stride;
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        Pair<T> out;
        out.lo = kt::from_float<T>(c[dt][2 * r] * factor);
        out.hi = kt::from_float<T>(c[dt][2 * r + 1] * factor);
        *reinterpret_cast<Pair<T>*>(dst + dt * 8 + 2 * t) = out;
      }
    }
  }
}

/// D = rowsum(dO * O) per query row (fp32), one warp per row; with
/// DQ_ATOMIC the row of the fp32 dQ accumulator is zeroed as well.
/// Grid: (ceil(seq / 8), heads, batch); block: 256 threads.
template <int HEAD_DIM, bool DQ_ATOMIC, class T>
__global__ void __launch_bounds__(256) attention_bwd_preprocess(
    const T* o,         // (batch, seq, heads, head_dim) through o_strides
    const T* dout,      // as o, through do_strides
    float* delta,       // (batch, heads, seq)
    float* dq_accum,    // (batch, heads, seq, head_dim) fp32 when DQ_ATOMIC
    Strides o_strides, Strides do_strides, int seq, int heads) {
  kt::wait_previous_kernel();
  const int row = static_cast<int>(blockIdx.x) * 8 + static_cast<int>(kt::warp_id());
  const int h = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z);
  if (row >= seq) return;  // the whole warp leaves together
  const int lane = static_cast<int>(kt::lane_id());
  const T* orow = o + b * o_strides.batch + h * o_strides.head + row * o_strides.seq;
  const T* dorow = dout + b * do_strides.batch + h * do_strides.head + row * do_strides.seq;
  float sum = 0.0f;
  for (int d = lane; d < HEAD_DIM; d += 32) sum += kt::to_float(orow[d]) * kt::to_float(dorow[d]);
  sum = kt::warp_sum(sum);
  const long long r = (static_cast<long long>(b) * heads + h) * seq + row;
  if (lane == 0) delta[r] = sum;
  if constexpr (DQ_ATOMIC)
    for (int d = lane; d < HEAD_DIM; d += 32) dq_accum[r * HEAD_DIM + d] = 0.0f;
}

/// dQ = scale * accumulator, as T. Grid: (ceil(seq * HEAD_DIM / 512), heads,
/// batch); block: 256 threads, two elements each.
template <int HEAD_DIM, class T>
__global__ void __launch_bounds__(256) attention_bwd_dq_convert(
    const float* dq_accum,  // (batch, heads, seq, head_dim) fp32
    T* dq,                  // (batch, seq, heads, head_dim) through dq_strides
    Strides dq_strides, int seq, int heads, float scale) {
  kt::wait_previous_kernel();
  const long long pair = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x;
  const int h = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z);
  if (pair * 2 >= static_cast<long long>(seq) * HEAD_DIM) return;
  const int row = static_cast<int>(pair * 2 / HEAD_DIM), col = static_cast<int>(pair * 2 % HEAD_DIM);
  const float* src = dq_accum + ((static_cast<long long>(b) * heads + h) * seq + row) * HEAD_DIM + col;
  Pair<T> out;
  out.lo = kt::from_float<T>(src[0] * scale);
  out.hi = kt::from_float<T>(src[1] * scale);
  *reinterpret_cast<Pair<T>*>(dq + b * dq_strides.batch + h * dq_strides.head + row * dq_strides.seq + col) = out;
}

/// Stores an m16 x (8 N) fp32 accumulator tile (n8 tiles c[.]) as T at rows
/// [row0, row0 + 16), columns [col0, col0 + 8 N) of a shared-memory tile
/// laid out by Layout, two neighbouring columns per store.
template <class Layout, int N, class T>
KT_DEVICE void stage_tile(T* tile, int row0, int col0, const float (&c)[N][4]) {
  const int lane = static_cast<int>(kt::lane_id()), g = lane / 4, t = lane % 4;
#pragma unroll
  for (int nt = 0; nt < N; ++nt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      Pair<T> out;
      out.lo = kt::from_float<T>(c[nt][2 * r]);
      out.hi = kt::from_float<T>(c[nt][2 * r + 1]);
      *reinterpret_cast<Pair<T>*>(tile + Layout::offset(row0 + 8 * r, g, col0 + nt * 8 + 2 * t)) = out;
    }
}

/// n16 column pairs of dQ in one warp's piece of attention_bwd_dkdv's dQ by
/// atomics: the widest of 4, 2 and 1 that divides the head dim's pairs,
/// still gives every warp a piece, and whose accumulators (8 registers per
/// pair) fit in those S^T and dP^T held (`st_registers`), so one dS
/// fragment feeds that many products.
KT_DEVICE constexpr int dq_piece_pairs(int row_blocks, int col_pairs, int warps, int st_registers) {
  for (int pairs = 4; pairs > 1; pairs /= 2)
    if (col_pairs % pairs == 0 && row_blocks * (col_pairs / pairs) >= warps && 8 * pairs <= st_registers)
      return pairs;
  return 1;
}

/// The (query head, query tile) steps of a dK/dV block whose keys start at
/// n0: the group's query heads from h0 in turn, each one's query tiles of
/// BLOCK_M in order, under a causal mask none wholly before the block's
/// first key. A step's Position is its first query, its query head and its
/// row of lse and D (and of dQ's accumulator), walked a query tile at a
/// time: no division per step, and no product for the row. (Walking the Q
/// and dO tiles' sources as well, two 64-bit pointers more across the loop,
/// had ptxas spill 84 of the 3978 configs admitted at sm_90, against 1 this
/// way.)
template <int BLOCK_M, bool CAUSAL>
struct QuerySteps {
  struct Position {
    int m0, h;
    long long row;  // (b, query head, m0) of (batch, heads, seq)
  };
  int seq, m_first, m_end;
  int total;  // steps
  Position first;

  KT_DEVICE QuerySteps(int n0, int seq_, int b, int heads, int h0, int kv_group) : seq(seq_) {
    const int m_begin = CAUSAL ? n0 / BLOCK_M : 0;
    const int m_count = (seq + BLOCK_M - 1) / BLOCK_M - m_begin;
    total = kv_group * m_count;
    m_first = m_begin * BLOCK_M;
    m_end = m_first + m_count * BLOCK_M;
    first = {m_first, h0, (static_cast<long long>(b) * heads + h0) * seq + m_first};
  }
  KT_DEVICE Position next(Position p) const {
    p.m0 += BLOCK_M;
    p.row += BLOCK_M;
    if (p.m0 == m_end) {  // the next query head's first tile
      p.m0 = m_first;
      p.row += seq - (m_end - m_first);
      ++p.h;
    }
    return p;
  }
};

/// Starts the copy of the lse and D of a step's BLOCK_M queries (from row
/// `row` of (batch, heads, seq), `rows_left` of them inside the sequence)
/// to `to`: lse, then D. Zeros past the sequence, where P is masked and a
/// stale NaN would reach dS.
template <int BLOCK_M, int THREADS>
KT_DEVICE void load_rows(float* to, const float* lse, const float* delta, long long row, int rows_left) {
#pragma unroll
  for (int it = 0; it < (2 * BLOCK_M + THREADS - 1) / THREADS; ++it) {
    const int i = it * THREADS + static_cast<int>(threadIdx.x);
    if (2 * BLOCK_M % THREADS == 0 || i < 2 * BLOCK_M) {
      if (i % BLOCK_M < rows_left)
        kt::cp_async_4(to + i, (i < BLOCK_M ? lse : delta) + row + i % BLOCK_M);
      else
        to[i] = 0.0f;
    }
  }
}

/// Grid: (ceil(seq / BLOCK_N), kv_heads, batch), the block of rank r
/// (attention_common.cuh's block_tile, by tile_order) taking key block r, so
/// under a causal mask the longest blocks start first; block: WARPS * 32 threads
/// in WARPS / WARP_SPLIT groups, each group owning BLOCK_N * WARP_SPLIT /
/// WARPS keys (one or two m16 tiles): the rows of S^T = K Q^T, dP^T = V dO^T
/// and of the dK, dV accumulators. The block walks (query head of its group)
/// x (query tile of BLOCK_M), Q and dO tiles arriving by cp.async, STAGES in
/// flight.
///   WARP_SPLIT 1: a warp computes its keys' S^T and dP^T over the whole
///     query tile and turns them, in registers, into the A fragments of
///     dV += P^T dO and dK += dS^T Q over the whole head dim.
///   WARP_SPLIT 2 or 4 (FlashAttention-2's partition of the backward): the
///     warps of a group split the query tile's columns of S^T and dP^T,
///     stage P^T and dS^T in shared memory, and split the head dim's columns
///     of dK and dV, so each warp holds 1 / WARP_SPLIT of the accumulators
///     and of S^T, dP^T: wider tiles in the same registers, for P^T's and
///     dS^T's round trip through shared memory and a barrier per step.
template <int HEAD_DIM,    // 16, 32, 64, 80 or 128: set by the problem
          int BLOCK_M,     // queries per tile walked: fewer barriers, atomics vs S^T/dP^T registers, shared memory
          int BLOCK_N,     // keys per block: more reuse of each Q/dO tile vs dK/dV registers and fewer blocks
          int WARPS,       // warps per block
          int WARP_SPLIT,  // warps sharing a group's keys (above): registers per warp vs staging P^T and dS^T
          int STAGES,      // Q/dO tiles in flight: load latency hidden vs shared memory
          int LAYOUT,      // shared-memory tiles: 0 padded rows (more shared memory), 1 XOR-swizzled chunks (packed)
          bool RESIDENT_REGS,  // K's and V's A fragments kept in registers (else re-read at every query tile)
          bool DQ_ATOMIC,  // dQ added here by fp32 atomics (else by attention_bwd_dq, a second pass)
          bool CAUSAL,     // key j > query i masked: set by the problem
          class T>         // __nv_bfloat16, __half, or float (tf32 matrix units)
__global__ void __launch_bounds__(WARPS * 32, 1)
    attention_bwd_dkdv(const T* q,            // (batch, seq, heads, head_dim) through q_strides
                       const T* k,            // (batch, seq, heads / kv_group, head_dim) through k_strides
                       const T* v,            // as k, through v_strides
                       const T* dout,         // as q, through do_strides
                       const float* lse,      // (batch, heads, seq): the forward's
                       const float* delta,    // (batch, heads, seq): rowsum(dO * O)
                       float* dq_accum,       // (batch, heads, seq, head_dim) fp32 when DQ_ATOMIC
                       T* dk, T* dv,          // as k, through dk_strides / dv_strides
                       Strides q_strides, Strides k_strides, Strides v_strides, Strides do_strides,
                       Strides dk_strides, Strides dv_strides, int seq, int heads, int kv_group, float scale,
                       int tile_order) {  // of the key blocks, as block_tile's
  kt::wait_previous_kernel();
  static_assert(HEAD_DIM % 16 == 0 && HEAD_DIM >= 16 && HEAD_DIM <= 256,
                "the head dim is whole k steps and whole n16 pairs of every product");
  static_assert(WARP_SPLIT == 1 || WARP_SPLIT == 2 || WARP_SPLIT == 4, "a group of keys is shared by 1, 2 or 4 warps");
  static_assert(WARPS % WARP_SPLIT == 0, "the warps form whole groups");
  static_assert(BLOCK_N % (16 * (WARPS / WARP_SPLIT)) == 0, "each group of warps owns whole m16 tiles of the keys");
  static_assert(BLOCK_M % (16 * WARP_SPLIT) == 0, "a warp's share of a query tile is whole n16 pairs of S^T");
  static_assert(HEAD_DIM % (16 * WARP_SPLIT) == 0, "a warp's share of the head dim is whole n16 pairs of dK, dV");
  static_assert(STAGES >= 1, "at least the tile being computed is in shared memory");
  constexpr bool STAGED = WARP_SPLIT > 1;  // P^T and dS^T through shared memory
  constexpr int THREADS = WARPS * 32;
  constexpr int KT = BLOCK_N / (16 * (WARPS / WARP_SPLIT));  // m16 tiles of keys per warp
  constexpr int KSTEPS = HEAD_DIM / Mma<T>::K;
  constexpr int MN = BLOCK_M / WARP_SPLIT / 8;  // n8 tiles of the warp's queries in S^T
  constexpr int DT = HEAD_DIM / WARP_SPLIT / 8;  // n8 tiles of the warp's columns of dK, dV
  constexpr int CHUNK = 16 / static_cast<int>(sizeof(T));
  using Layout = TileLayout<HEAD_DIM, LAYOUT, CHUNK>;
  using DsLayout = TileLayout<BLOCK_M, LAYOUT, CHUNK>;  // P^T and dS^T: (BLOCK_N keys, BLOCK_M queries)
  using F = Frag<Layout, T>;
  using FS = Frag<DsLayout, T>;
  constexpr int TILE_N = BLOCK_N * Layout::ROW, TILE_M = BLOCK_M * Layout::ROW;
  const float log2e = 1.4426950408889634f;
  const float scale_log2 = scale * log2e;

  T* sk = kt::dynamic_shared<T>();       // (BLOCK_N, HEAD_DIM)
  T* sv = sk + TILE_N;                   // (BLOCK_N, HEAD_DIM)
  T* sq = sv + TILE_N;                   // STAGES x (BLOCK_M, HEAD_DIM)
  T* sdo = sq + STAGES * TILE_M;         // STAGES x (BLOCK_M, HEAD_DIM)
  float* srows = reinterpret_cast<float*>(sdo + STAGES * TILE_M);  // STAGES x (lse, D) of BLOCK_M queries
  // dS^T (BLOCK_N, BLOCK_M) when DQ_ATOMIC or STAGED: in V's tile when V's
  // fragments stay in registers, its rows are no wider than V's and P^T is
  // not staged, else after the lse and D stages; P^T (STAGED) after dS^T.
  constexpr bool DS_IN_V = !STAGED && DQ_ATOMIC && RESIDENT_REGS && BLOCK_M <= HEAD_DIM;
  T* sds = DS_IN_V ? sv : reinterpret_cast<T*>(srows + STAGES * 2 * BLOCK_M);
  T* sp = sds + BLOCK_N * DsLayout::ROW;

  const BlockTile tile = block_tile<CAUSAL>(tile_order);  // rank 0: the first keys, which most queries see
  const int n0 = tile.rank * BLOCK_N;
  const int kvh = tile.head, b = tile.batch;
  const int lane = static_cast<int>(kt::lane_id()), warp = static_cast<int>(kt::warp_id());
  const int g = lane / 4, t = lane % 4;
  const int warp_key0 = warp / WARP_SPLIT * KT * 16;
  const int warp_query0 = warp % WARP_SPLIT * (BLOCK_M / WARP_SPLIT);  // the warp's columns of S^T
  const int warp_col0 = warp % WARP_SPLIT * (HEAD_DIM / WARP_SPLIT);   // the warp's columns of dK, dV
  const T* kh = k + b * k_strides.batch + kvh * k_strides.head;
  const T* vh = v + b * v_strides.batch + kvh * v_strides.head;
  const QuerySteps<BLOCK_M, CAUSAL> steps(n0, seq, b, heads, kvh * kv_group, kv_group);
  const int total = steps.total;  // (query head, query tile) steps
  auto load_step = [&](int step, const auto& at) {
    const int s = step % STAGES;
    load_tile<BLOCK_M, HEAD_DIM, LAYOUT, THREADS>(sq + s * TILE_M, q + b * q_strides.batch + at.h * q_strides.head,
                                             q_strides.seq, at.m0, seq);
    load_tile<BLOCK_M, HEAD_DIM, LAYOUT, THREADS>(
        sdo + s * TILE_M, dout + b * do_strides.batch + at.h * do_strides.head, do_strides.seq, at.m0, seq);
    load_rows<BLOCK_M, THREADS>(srows + s * 2 * BLOCK_M, lse, delta, at.row, seq - at.m0);
  };
  // Prologue: K and V join step 0's group; steps 0 .. STAGES-2 in flight.
  load_tile<BLOCK_N, HEAD_DIM, LAYOUT, THREADS>(sk, kh, k_strides.seq, n0, seq);
  load_tile<BLOCK_N, HEAD_DIM, LAYOUT, THREADS>(sv, vh, v_strides.seq, n0, seq);
  auto at = steps.first;
  auto loading = at;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < total) load_step(s, loading);
    loading = steps.next(loading);
    kt::cp_async_commit();
  }

  float dk_acc[KT][DT][4], dv_acc[KT][DT][4];
#pragma unroll
  for (int kt_ = 0; kt_ < KT; ++kt_)
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
#pragma unroll
      for (int i = 0; i < 4; ++i) dk_acc[kt_][dt][i] = dv_acc[kt_][dt][i] = 0.0f;
  // RESIDENT_REGS: K's and V's A fragments of the warp's keys, from the first step on.
  unsigned k_res[RESIDENT_REGS ? KT : 1][RESIDENT_REGS ? KSTEPS : 1][4];
  unsigned v_res[RESIDENT_REGS ? KT : 1][RESIDENT_REGS ? KSTEPS : 1][4];

  for (int step = 0; step < total; ++step) {
    // step's tiles (and, first, K and V) have landed; the step STAGES - 1 ahead refills step - 1's stage.
    pipeline_head<STAGES>(step, total, [&](int ahead) { load_step(ahead, loading); });
    loading = steps.next(loading);

    const int m0 = at.m0;
    const T* sqt = sq + step % STAGES * TILE_M;
    const T* sdot = sdo + step % STAGES * TILE_M;
    if constexpr (RESIDENT_REGS)
      if (step == 0)
#pragma unroll
        for (int kt_ = 0; kt_ < KT; ++kt_)
#pragma unroll
          for (int ks = 0; ks < KSTEPS; ++ks) {
            F::a(k_res[kt_][ks], sk, warp_key0 + kt_ * 16, ks * Mma<T>::K);
            F::a(v_res[kt_][ks], sv, warp_key0 + kt_ * 16, ks * Mma<T>::K);
          }
    if constexpr (DS_IN_V)
      if (step == 0) __syncthreads();  // every warp holds V's fragments before dS^T overwrites its tile

    // S^T = K Q^T and dP^T = V dO^T: rows are the warp's keys, columns its queries of the tile.
    float s[KT][MN][4], dp[KT][MN][4];
#pragma unroll
    for (int kt_ = 0; kt_ < KT; ++kt_)
#pragma unroll
      for (int nt = 0; nt < MN; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) s[kt_][nt][i] = dp[kt_][nt][i] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
      unsigned ka[KT][4], va[KT][4];
#pragma unroll
      for (int kt_ = 0; kt_ < KT; ++kt_) {
        if constexpr (RESIDENT_REGS) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            ka[kt_][i] = k_res[kt_][ks][i];
            va[kt_][i] = v_res[kt_][ks][i];
          }
        } else {
          F::a(ka[kt_], sk, warp_key0 + kt_ * 16, ks * Mma<T>::K);
          F::a(va[kt_], sv, warp_key0 + kt_ * 16, ks * Mma<T>::K);
        }
      }
#pragma unroll
      for (int np = 0; np < MN / 2; ++np) {
        unsigned qb[4], dob[4];
        F::b_pair(qb, sqt, warp_query0 + np * 16, ks * Mma<T>::K);
        F::b_pair(dob, sdot, warp_query0 + np * 16, ks * Mma<T>::K);
#pragma unroll
        for (int kt_ = 0; kt_ < KT; ++kt_) {
          Mma<T>::run(s[kt_][2 * np], ka[kt_], qb);
          Mma<T>::run(s[kt_][2 * np + 1], ka[kt_], qb + 2);
          Mma<T>::run(dp[kt_][2 * np], va[kt_], dob);
          Mma<T>::run(dp[kt_][2 * np + 1], va[kt_], dob + 2);
        }
      }
    }

    // P^T = exp(scale * S^T - lse) and dS^T = P^T * (dP^T - D), masked
    // where the query or the key is past the sequence or (causal) the query
    // is before the key. Keys past the sequence are zero rows of K and V,
    // but their P^T is exp(-lse), which overflows T where lse is very
    // negative, and inf times K's zero would be NaN in dQ.
    const bool masked_tile = m0 + BLOCK_M > seq || n0 + BLOCK_N > seq || (CAUSAL && m0 < n0 + BLOCK_N - 1);
    const float* lse_s = srows + step % STAGES * 2 * BLOCK_M + warp_query0 + 2 * t;
#pragma unroll
    for (int nt = 0; nt < MN; ++nt) {
      const float2 lse2 = *reinterpret_cast<const float2*>(lse_s + nt * 8);
      const float2 d2 = *reinterpret_cast<const float2*>(lse_s + BLOCK_M + nt * 8);
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int query = m0 + warp_query0 + nt * 8 + 2 * t + e;
        const float l2 = (e == 0 ? lse2.x : lse2.y) * log2e;
        const float dd = e == 0 ? d2.x : d2.y;
#pragma unroll
        for (int kt_ = 0; kt_ < KT; ++kt_)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int i = 2 * r + e;
            float p = kt::exp2_approx(s[kt_][nt][i] * scale_log2 - l2);
            if (masked_tile) {
              const int key = n0 + warp_key0 + kt_ * 16 + g + 8 * r;
              if (query >= seq || key >= seq || (CAUSAL && query < key)) p = 0.0f;
            }
            s[kt_][nt][i] = p;
            dp[kt_][nt][i] = p * (dp[kt_][nt][i] - dd);
          }
      }
    }
    if constexpr (STAGED) {
      // P^T and dS^T to shared memory as T: the group's warps read each other's columns.
#pragma unroll
      for (int kt_ = 0; kt_ < KT; ++kt_) {
        stage_tile<DsLayout>(sp, warp_key0 + kt_ * 16, warp_query0, s[kt_]);
        stage_tile<DsLayout>(sds, warp_key0 + kt_ * 16, warp_query0, dp[kt_]);
      }
      __syncthreads();
    }

    // dV += P^T dO and dK += dS^T Q (unscaled) over the warp's columns: k = the tile's queries.
#pragma unroll
    for (int kk = 0; kk < BLOCK_M / Mma<T>::K; ++kk) {
      unsigned pa[KT][4], dsa[KT][4];
#pragma unroll
      for (int kt_ = 0; kt_ < KT; ++kt_) {
        if constexpr (STAGED) {
          FS::a(pa[kt_], sp, warp_key0 + kt_ * 16, kk * Mma<T>::K);
          FS::a(dsa[kt_], sds, warp_key0 + kt_ * 16, kk * Mma<T>::K);
        } else {
          acc_to_a<T>(pa[kt_], s[kt_], kk);
          acc_to_a<T>(dsa[kt_], dp[kt_], kk);
        }
      }
#pragma unroll
      for (int dp2 = 0; dp2 < DT / 2; ++dp2) {
        unsigned dob[4], qb[4];
        F::template b_trans_pair<!STAGED>(dob, sdot, kk * Mma<T>::K, warp_col0 + dp2 * 16);
        F::template b_trans_pair<!STAGED>(qb, sqt, kk * Mma<T>::K, warp_col0 + dp2 * 16);
#pragma unroll
        for (int kt_ = 0; kt_ < KT; ++kt_) {
          Mma<T>::run(dv_acc[kt_][2 * dp2], pa[kt_], dob);
          Mma<T>::run(dv_acc[kt_][2 * dp2 + 1], pa[kt_], dob + 2);
          Mma<T>::run(dk_acc[kt_][2 * dp2], dsa[kt_], qb);
          Mma<T>::run(dk_acc[kt_][2 * dp2 + 1], dsa[kt_], qb + 2);
        }
      }
    }

    if constexpr (DQ_ATOMIC) {
      // dS^T to shared memory as T (staged above already), then dQ(tile) +=
      // dS K: each warp takes m16 x (16 PAIRS) pieces of the (BLOCK_M,
      // HEAD_DIM) product, k = the block's keys, one dS fragment feeding
      // PAIRS n16 pairs of K.
      if constexpr (!STAGED) {
#pragma unroll
        for (int kt_ = 0; kt_ < KT; ++kt_) stage_tile<DsLayout>(sds, warp_key0 + kt_ * 16, 0, dp[kt_]);
        __syncthreads();
      }
      constexpr int ROW_BLOCKS = BLOCK_M / 16;
      constexpr int PAIRS = dq_piece_pairs(ROW_BLOCKS, HEAD_DIM / 16, WARPS, KT * BLOCK_M / WARP_SPLIT);
      constexpr int PIECES = ROW_BLOCKS * (HEAD_DIM / 16 / PAIRS);
      float* dq_lane = dq_accum + (at.row + g) * HEAD_DIM + 2 * t;  // the lane's first row and column of the tile
      for (int piece = warp; piece < PIECES; piece += WARPS) {
        const int mq = piece % ROW_BLOCKS, dc = piece / ROW_BLOCKS * PAIRS;  // dc: the piece's first n16 pair
        float c[2 * PAIRS][4];
#pragma unroll
        for (int nt = 0; nt < 2 * PAIRS; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) c[nt][i] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < BLOCK_N / Mma<T>::K; ++kk) {
          unsigned a[4];
          FS::a_trans(a, sds, mq * 16, kk * Mma<T>::K);
#pragma unroll
          for (int j = 0; j < PAIRS; ++j) {
            unsigned kb[4];
            F::template b_trans_pair<false>(kb, sk, kk * Mma<T>::K, (dc + j) * 16);
            Mma<T>::run(c[2 * j], a, kb);
            Mma<T>::run(c[2 * j + 1], a, kb + 2);
          }
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int query = mq * 16 + g + 8 * r;  // of the tile
          if (m0 + query < seq)
#pragma unroll
            for (int nt = 0; nt < 2 * PAIRS; ++nt) {
              kt::atomic_add2(dq_lane + (mq * 16 + 8 * r) * HEAD_DIM + dc * 16 + nt * 8, c[nt][2 * r],
                              c[nt][2 * r + 1]);
            }
        }
      }
    }
    at = steps.next(at);  // the next step's head barrier keeps its loads and P^T, dS^T off this step's
  }

  // dK = scale * dS^T Q, dV = P^T dO, for the keys inside the sequence.
  T* dkh = dk + b * dk_strides.batch + kvh * dk_strides.head + warp_col0;
  T* dvh = dv + b * dv_strides.batch + kvh * dv_strides.head + warp_col0;
#pragma unroll
  for (int kt_ = 0; kt_ < KT; ++kt_) {
    store_rows<DT>(dkh, dk_strides.seq, n0 + warp_key0 + kt_ * 16, seq, dk_acc[kt_], scale);
    store_rows<DT>(dvh, dv_strides.seq, n0 + warp_key0 + kt_ * 16, seq, dv_acc[kt_], 1.0f);
  }
}

/// dQ without atomics, a second pass. Grid: (ceil(seq / BLOCK_N), heads,
/// batch), the block of rank r (block_tile, by tile_order) taking query
/// block gridDim.x - 1 - r, the longest first; block: WARPS * 32 threads, each warp owning BLOCK_N / WARPS
/// query rows (the rows of S, dP, dS and the dQ accumulator); the block
/// walks the key tiles of BLOCK_M keys (to the diagonal under a causal
/// mask), K and V tiles arriving by cp.async, STAGES in flight.
template <int HEAD_DIM, int BLOCK_M, int BLOCK_N, int WARPS, int STAGES, int LAYOUT, bool RESIDENT_REGS, bool CAUSAL,
          class T>
__global__ void __launch_bounds__(WARPS * 32, 1)
    attention_bwd_dq(const T* q, const T* k, const T* v, const T* dout, const float* lse, const float* delta,
                     T* dq,  // as q, through dq_strides
                     Strides q_strides, Strides k_strides, Strides v_strides, Strides do_strides,
                     Strides dq_strides, int seq, int heads, int kv_group, float scale,
                     int tile_order) {  // of the query blocks, as block_tile's
  kt::wait_previous_kernel();
  static_assert(HEAD_DIM % 16 == 0 && HEAD_DIM >= 16 && HEAD_DIM <= 256,
                "the head dim is whole k steps and whole n16 pairs of every product");
  static_assert(BLOCK_N % (16 * WARPS) == 0, "each warp owns whole m16 tiles of the block's query rows");
  static_assert(BLOCK_M % 16 == 0, "a key tile is whole n16 pairs of S and k16 steps of dQ");
  static_assert(STAGES >= 1, "at least the tile being computed is in shared memory");
  constexpr int THREADS = WARPS * 32;
  constexpr int MT = BLOCK_N / (16 * WARPS);  // m16 tiles of query rows per warp
  constexpr int KSTEPS = HEAD_DIM / Mma<T>::K;
  constexpr int NT = BLOCK_M / 8;  // n8 tiles of keys in S
  constexpr int DT = HEAD_DIM / 8;
  using Layout = TileLayout<HEAD_DIM, LAYOUT, 16 / static_cast<int>(sizeof(T))>;
  using F = Frag<Layout, T>;
  constexpr int TILE_Q = BLOCK_N * Layout::ROW, TILE_K = BLOCK_M * Layout::ROW;
  const float log2e = 1.4426950408889634f;
  const float scale_log2 = scale * log2e;

  T* sq = kt::dynamic_shared<T>();  // (BLOCK_N, HEAD_DIM)
  T* sdo = sq + TILE_Q;             // (BLOCK_N, HEAD_DIM)
  T* sk = sdo + TILE_Q;             // STAGES x (BLOCK_M, HEAD_DIM)
  T* sv = sk + STAGES * TILE_K;     // STAGES x (BLOCK_M, HEAD_DIM)

  const BlockTile tile = block_tile<CAUSAL>(tile_order);
  const int m_block = static_cast<int>(gridDim.x) - 1 - tile.rank;  // rank 0: the last queries, which see most keys
  const int h = tile.head, b = tile.batch;
  const int m0 = m_block * BLOCK_N;
  const int lane = static_cast<int>(kt::lane_id()), warp = static_cast<int>(kt::warp_id());
  const int g = lane / 4, t = lane % 4;
  const int warp_row0 = warp * MT * 16;
  const T* kh = k + b * k_strides.batch + h / kv_group * k_strides.head;
  const T* vh = v + b * v_strides.batch + h / kv_group * v_strides.head;
  const int rows_end = min(m0 + BLOCK_N, seq);
  const int n_tiles = ((CAUSAL ? rows_end : seq) + BLOCK_M - 1) / BLOCK_M;
  const long long row_base = (static_cast<long long>(b) * heads + h) * seq;

  load_tile<BLOCK_N, HEAD_DIM, LAYOUT, THREADS>(sq, q + b * q_strides.batch + h * q_strides.head, q_strides.seq, m0, seq);
  load_tile<BLOCK_N, HEAD_DIM, LAYOUT, THREADS>(sdo, dout + b * do_strides.batch + h * do_strides.head, do_strides.seq,
                                           m0, seq);
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < n_tiles) {
      load_tile<BLOCK_M, HEAD_DIM, LAYOUT, THREADS>(sk + s * TILE_K, kh, k_strides.seq, s * BLOCK_M, seq);
      load_tile<BLOCK_M, HEAD_DIM, LAYOUT, THREADS>(sv + s * TILE_K, vh, v_strides.seq, s * BLOCK_M, seq);
    }
    kt::cp_async_commit();
  }

  // The rows' lse (log2 units) and D; rows past the sequence read neither.
  float row_l2[MT][2], row_d[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = m0 + warp_row0 + mt * 16 + g + 8 * r;
      row_l2[mt][r] = row < seq ? lse[row_base + row] * log2e : 0.0f;
      row_d[mt][r] = row < seq ? delta[row_base + row] : 0.0f;
    }
  float acc[MT][DT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][dt][i] = 0.0f;
  // RESIDENT_REGS: Q's and dO's A fragments of the warp's rows, from the first key tile on.
  unsigned q_res[RESIDENT_REGS ? MT : 1][RESIDENT_REGS ? KSTEPS : 1][4];
  unsigned do_res[RESIDENT_REGS ? MT : 1][RESIDENT_REGS ? KSTEPS : 1][4];

  for (int n = 0; n < n_tiles; ++n) {
    pipeline_head<STAGES>(n, n_tiles, [&](int next) {
      const int s = next % STAGES;
      load_tile<BLOCK_M, HEAD_DIM, LAYOUT, THREADS>(sk + s * TILE_K, kh, k_strides.seq, next * BLOCK_M, seq);
      load_tile<BLOCK_M, HEAD_DIM, LAYOUT, THREADS>(sv + s * TILE_K, vh, v_strides.seq, next * BLOCK_M, seq);
    });
    const T* skt = sk + n % STAGES * TILE_K;
    const T* svt = sv + n % STAGES * TILE_K;
    const int n0 = n * BLOCK_M;
    if constexpr (RESIDENT_REGS)
      if (n == 0)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int ks = 0; ks < KSTEPS; ++ks) {
            F::a(q_res[mt][ks], sq, warp_row0 + mt * 16, ks * Mma<T>::K);
            F::a(do_res[mt][ks], sdo, warp_row0 + mt * 16, ks * Mma<T>::K);
          }

    // S = Q K^T and dP = dO V^T for the warp's rows.
    float s[MT][NT][4], dp[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) s[mt][nt][i] = dp[mt][nt][i] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
      unsigned qa[MT][4], doa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (RESIDENT_REGS) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            qa[mt][i] = q_res[mt][ks][i];
            doa[mt][i] = do_res[mt][ks][i];
          }
        } else {
          F::a(qa[mt], sq, warp_row0 + mt * 16, ks * Mma<T>::K);
          F::a(doa[mt], sdo, warp_row0 + mt * 16, ks * Mma<T>::K);
        }
      }
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        unsigned kb[4], vb[4];
        F::b_pair(kb, skt, np * 16, ks * Mma<T>::K);
        F::b_pair(vb, svt, np * 16, ks * Mma<T>::K);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          Mma<T>::run(s[mt][2 * np], qa[mt], kb);
          Mma<T>::run(s[mt][2 * np + 1], qa[mt], kb + 2);
          Mma<T>::run(dp[mt][2 * np], doa[mt], vb);
          Mma<T>::run(dp[mt][2 * np + 1], doa[mt], vb + 2);
        }
      }
    }

    // dS = P * (dP - D), P = exp(scale * S - lse); masked past the sequence
    // and, under a causal mask, after the query.
    const bool masked_tile = n0 + BLOCK_M > seq || (CAUSAL && n0 + BLOCK_M - 1 > m0);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          float p = kt::exp2_approx(s[mt][nt][i] * scale_log2 - row_l2[mt][i / 2]);
          if (masked_tile) {
            const int row = m0 + warp_row0 + mt * 16 + g + 8 * (i / 2);
            const int key = n0 + nt * 8 + 2 * t + i % 2;
            if (key >= seq || (CAUSAL && key > row)) p = 0.0f;
          }
          dp[mt][nt][i] = p * (dp[mt][nt][i] - row_d[mt][i / 2]);
        }

    // dQ += dS K (unscaled): k = the tile's keys.
#pragma unroll
    for (int kk = 0; kk < BLOCK_M / Mma<T>::K; ++kk) {
      unsigned dsa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) acc_to_a<T>(dsa[mt], dp[mt], kk);
#pragma unroll
      for (int dp2 = 0; dp2 < DT / 2; ++dp2) {
        unsigned kb[4];
        F::template b_trans_pair<true>(kb, skt, kk * Mma<T>::K, dp2 * 16);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          Mma<T>::run(acc[mt][2 * dp2], dsa[mt], kb);
          Mma<T>::run(acc[mt][2 * dp2 + 1], dsa[mt], kb + 2);
        }
      }
    }
  }

  T* dqh = dq + b * dq_strides.batch + h * dq_strides.head;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) store_rows<DT>(dqh, dq_strides.seq, m0 + warp_row0 + mt * 16, seq, acc[mt], scale);
}

}  // namespace attention
