// Attention forward kernel on Hopper's warpgroup products (sm_90a; the
// family's `mma` 1 and 2): the math of attention.cuh (online softmax with
// lazily moved bases, O and the row log-sum-exp in fp32), with the two
// products issued as wgmma by whole warpgroups instead of mma.sync by warps.
//   S = Q K^T  wgmma_ss: Q and K both from shared memory (K-major)
//   O += P V   wgmma_rs: P from registers (S's accumulator fragment is
//              already the A fragment), V from shared memory (N-major)
// 16-bit inputs (bf16, f16); head dims 64 and 128.
//
// Two schedules of a warpgroup's products (the family's `mma` 1 and 2):
// - in turn: S of a key tile, its softmax, then P V, each product waited
//   for before the next step;
// - overlapped (OVERLAP, FlashAttention-3's intra-warpgroup pipelining): S
//   of the next key tile and this tile's P V are issued together, and the
//   next tile's softmax runs while P V is still in flight; O's rescale, when
//   the bases move, waits for P V. A second score tile in registers, and
//   STAGES >= 2: the K tiles run a tile ahead of the V tiles.
// With PINGPONG (the family's `pingpong`, FlashAttention-3's ping-pong) the
// two warpgroups issue their products in turns (attention_common.cuh's
// Turns): each waits until the other has issued its last ones, so the
// products of one run beside the softmax of the other, instead of both
// warpgroups' products together, then both softmaxes with the tensor cores
// idle.
//
// Layout: a block owns BLOCK_M = 64 * WARPGROUPS query rows of one
// (batch, head); warpgroup w takes rows 64 w .. 64 w + 63, each of its warps
// 16 of them (the fragments of attention.cuh's one m16 tile a warp). The
// block walks the keys in tiles of BLOCK_N, STAGES tiles in flight by
// cp.async, as attention.cuh does.
//
// Shared memory (dynamic, 1024-byte aligned tiles): the Q tile, STAGES K
// tiles, STAGES V tiles, each in PanelLayout: HEAD_DIM / 64 panels of 64
// columns, a panel's rows 128 bytes apart with chunk c of row r at chunk
// c ^ (r % 8), which is wgmma's 128-byte swizzle:
//   (BLOCK_M + 2 * STAGES * BLOCK_N) * HEAD_DIM * sizeof(T) bytes.
#pragma once
// attention.cuh: mask_scores, the online softmax's steps, store_output,
// and the pieces of attention_common.cuh (block_tile, acc_to_a).
#include "attention/attention.cuh"
#include "common/wgmma.cuh"

namespace attention {

/// Where element (row, col) of a ROWS-row tile lives: panels of 64 columns
/// (128 bytes of a row), ROWS * 64 elements each, 16-byte chunks swizzled
/// by the row within each 8-row, 1024-byte atom.
template <int ROWS, int HEAD_DIM>
struct PanelLayout {
  static_assert(HEAD_DIM % 64 == 0, "rows are whole 128-byte panels");
  static constexpr int PANEL = ROWS * 64;  // elements per panel
  static constexpr unsigned PANEL_BYTES = PANEL * 2;
  KT_DEVICE static int offset(int row, int col) {
    return col / 64 * PANEL + row * 64 + ((col % 64 / 8) ^ (row % 8)) * 8 + col % 8;
  }
};

/// Starts the copy of rows [row0, row0 + ROWS) of a (seq, HEAD_DIM) matrix
/// into a PanelLayout tile; rows at or past `seq` are zero-filled. Completes
/// at the covering cp_async_wait.
template <int ROWS, int HEAD_DIM, int THREADS, class T>
KT_DEVICE void load_panels(T* dst, const T* src, long long row_stride, int row0, int seq) {
  constexpr int CHUNKS = HEAD_DIM / 8;
  constexpr int ITERS = (ROWS * CHUNKS + THREADS - 1) / THREADS;
#pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    const int c = it * THREADS + static_cast<int>(threadIdx.x);
    if (ROWS * CHUNKS % THREADS == 0 || c < ROWS * CHUNKS) {
      const int r = c / CHUNKS, col = c % CHUNKS * 8;
      T* to = dst + PanelLayout<ROWS, HEAD_DIM>::offset(r, col);
      if (row0 + r < seq)
        kt::cp_async_16(to, src + (row0 + r) * row_stride + col);
      else
        kt::cp_async_16_zfill(to, src, 0);  // reads nothing; row 0 exists (seq >= 1)
    }
  }
}

/// pipeline_head (attention_common.cuh) for tiles wgmma reads: between the
/// wait for this thread's copies and the barrier, fence.proxy.async makes
/// them visible to the warpgroups' products (which read shared memory
/// through the async proxy, cp.async writes it through the generic one).
template <int STAGES, class Load>
KT_DEVICE void wgmma_pipeline_head(int it, int count, Load&& load) {
  if constexpr (STAGES == 1) {
    __syncthreads();
    load(it);
    kt::cp_async_commit();
    kt::cp_async_wait<0>();
    kt::fence_proxy_async();
    __syncthreads();
  } else {
    kt::cp_async_wait<STAGES - 2>();
    kt::fence_proxy_async();
    __syncthreads();
    if (it + STAGES - 1 < count) load(it + STAGES - 1);
    kt::cp_async_commit();
  }
}

/// Grid: (ceil(seq / BLOCK_M), heads, batch), the query blocks in the order
/// of attention_common.cuh's (block_tile, tile_order). Block: WARPGROUPS * 128
/// threads; dynamic shared memory as in the file header. Arguments as
/// attention_fwd's.
///
/// Overlapped, the cp.async groups are {Q, K 0}, then one per step n from
/// 1 - STAGES on: {K n + STAGES, V n + STAGES - 1}, each into the slot of the
/// K or V tile that the previous step finished with. Step n (n >= 0) issues
/// S of tile n + 1 and P V of tile n, so it needs group n + 1 - STAGES
/// complete: all but the STAGES - 2 newest.
template <int HEAD_DIM,    // 64 or 128: set by the problem
          int BLOCK_M,     // 64 * WARPGROUPS query rows per block
          int BLOCK_N,     // keys per tile: 16, 32, 64 or 128 (the N of Q K^T)
          int WARPGROUPS,  // 1 or 2
          int STAGES,      // K/V tiles in flight
          bool OVERLAP,    // the next tile's S and softmax beside this tile's P V
          bool PINGPONG,   // the two warpgroups' products in turns, one's softmax beside the other's products
          bool CAUSAL,     // key j > query i masked: set by the problem
          class T>         // __nv_bfloat16 or __half
__global__ void __launch_bounds__(WARPGROUPS * 128, 1)
    attention_fwd_wgmma(const T* q, const T* k, const T* v, T* o, float* lse, Strides q_strides,
                        Strides k_strides, Strides v_strides, Strides o_strides, int seq, int heads, int kv_group,
                        float scale, int tile_order) {
  kt::wait_previous_kernel();
  static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "head dims 64 and 128: whole 128-byte panels, wgmma's N");
  static_assert(BLOCK_M == 64 * WARPGROUPS, "each warpgroup owns 64 query rows, a wgmma's M");
  static_assert(BLOCK_N == 16 || BLOCK_N == 32 || BLOCK_N == 64 || BLOCK_N == 128, "a key tile is a wgmma's N");
  static_assert(STAGES >= 1, "at least the tile being computed is in shared memory");
  static_assert(!OVERLAP || STAGES >= 2, "overlapped, a step reads two K tiles");
  static_assert(!PINGPONG || WARPGROUPS == 2, "two warpgroups take turns");
  constexpr int THREADS = WARPGROUPS * 128;
  constexpr int NT = BLOCK_N / 8;   // n8 blocks of S
  constexpr int DT = HEAD_DIM / 8;  // n8 blocks of O
  using QLayout = PanelLayout<BLOCK_M, HEAD_DIM>;
  using KVLayout = PanelLayout<BLOCK_N, HEAD_DIM>;
  constexpr int TILE_Q = BLOCK_M * HEAD_DIM;
  constexpr int TILE_KV = BLOCK_N * HEAD_DIM;
  const float neg_inf = __uint_as_float(0xff800000u);
  const float scale_log2 = scale * 1.4426950408889634f;

  T* sq = kt::dynamic_shared<T>();
  T* sk = sq + TILE_Q;
  T* sv = sk + STAGES * TILE_KV;

  const BlockTile tile = block_tile<CAUSAL>(tile_order);
  const int m_block = static_cast<int>(gridDim.x) - 1 - tile.rank;
  const int h = tile.head, b = tile.batch;
  const int m0 = m_block * BLOCK_M;
  const T* qh = q + b * q_strides.batch + h * q_strides.head;
  const T* kh = k + b * k_strides.batch + h / kv_group * k_strides.head;
  const T* vh = v + b * v_strides.batch + h / kv_group * v_strides.head;
  const int rows_end = min(m0 + BLOCK_M, seq);
  const int n_tiles = ((CAUSAL ? rows_end : seq) + BLOCK_N - 1) / BLOCK_N;

  const int warp = static_cast<int>(kt::warp_id());
  const int group_row0 = warp / 4 * 64;  // the warpgroup's first row within the block
  const int warp_row0 = warp * 16;       // the warp's

  float acc[DT * 4];  // O: d[4 dt + 0, 1] row g, columns 8 dt + 2t (+1); d[4 dt + 2, 3] row g + 8
  float row_max[1][2], row_sum[1][2];  // as attention.cuh's, of the warp's one m16 tile
  float rescale[2];                    // O's row factors when a softmax moves the bases
#pragma unroll
  for (int i = 0; i < DT * 4; ++i) acc[i] = 0.0f;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_max[0][r] = neg_inf;
    row_sum[0][r] = 0.0f;
  }
  float s[NT * 4];               // S, then P, of one key tile: wgmma's D fragment is mma.sync's accumulator
  unsigned pa[BLOCK_N / 16][4];  // P as A fragments, one k16 step of P V each
  auto& s_tile = *reinterpret_cast<float(*)[1][NT][4]>(s);
  auto& acc_tile = *reinterpret_cast<float(*)[1][DT][4]>(acc);

  // S = Q K^T over HEAD_DIM / 16 k steps, issued and committed: a step's 16
  // columns are 32 bytes into a panel's rows, rows 8 apart by 1024 bytes (SBO).
  const auto issue_scores = [&](const T* skt) {
#pragma unroll
    for (int ks = 0; ks < HEAD_DIM / 16; ++ks) {
      const int col = ks * 16;
      const unsigned long long dq = kt::wgmma_desc(sq + QLayout::offset(group_row0, col), 1, 16, 1024);
      const unsigned long long dk = kt::wgmma_desc(skt + KVLayout::offset(0, col), 1, 16, 1024);
      kt::wgmma_ss<BLOCK_N, T, 0, 0>(s, dq, dk, ks > 0);
    }
    kt::wgmma_commit();
  };
  // O += P V over BLOCK_N / 16 k steps, issued and committed: a step's 16
  // keys are 16 rows of the V tile (2048 bytes into each panel), 8 rows
  // apart by 1024 bytes (SBO); the head dim's second panel is a panel
  // further (LBO).
  const auto issue_pv = [&](const T* svt) {
#pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
      const unsigned long long dv =
          kt::wgmma_desc(svt + KVLayout::offset(kk * 16, 0), 1, KVLayout::PANEL_BYTES, 1024);
      kt::wgmma_rs<HEAD_DIM, T, 1>(acc, pa[kk], dv, true);
    }
    kt::wgmma_commit();
  };
  // The masks and attention.cuh's online softmax of key tile n's scores, on
  // the warp's one m16 tile; whether O needs `rescale`.
  const auto softmax = [&](int n) {
    const int n0 = n * BLOCK_N;
    if (n0 + BLOCK_N > seq || (CAUSAL && n0 + BLOCK_N - 1 > m0 + group_row0))
      mask_scores<1, NT, CAUSAL>(s_tile, m0 + warp_row0, n0, seq);
    const bool moved = move_bases<1, NT>(s_tile, row_max, row_sum, scale_log2,
                                         [&](int, int r, float factor) { rescale[r] = factor; });
    exp_scores<1, NT>(s_tile, row_max, row_sum, scale_log2);
    return moved;
  };
  const auto rescale_o = [&] {
#pragma unroll
    for (int r = 0; r < 2; ++r) rescale_rows<1, DT>(acc_tile, 0, r, rescale[r]);
  };
  const auto p_to_a = [&] {
#pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; ++kk) acc_to_a<T>(pa[kk], s_tile[0], kk);
  };

  // Start the copy of key tile t's K (V) into its slot; nothing past the last tile.
  const auto load_k = [&](int t) {
    if (t < n_tiles)
      load_panels<BLOCK_N, HEAD_DIM, THREADS>(sk + t % STAGES * TILE_KV, kh, k_strides.seq, t * BLOCK_N, seq);
  };
  const auto load_v = [&](int t) {
    if (t < n_tiles)
      load_panels<BLOCK_N, HEAD_DIM, THREADS>(sv + t % STAGES * TILE_KV, vh, v_strides.seq, t * BLOCK_N, seq);
  };
  load_panels<BLOCK_M, HEAD_DIM, THREADS>(sq, qh, q_strides.seq, m0, seq);

  const Turns<PINGPONG> turns{warp / 4};
  turns.start();

  if constexpr (!OVERLAP) {
#pragma unroll
    for (int st = 0; st < STAGES - 1; ++st) {
      load_k(st);
      load_v(st);
      kt::cp_async_commit();
    }
    for (int n = 0; n < n_tiles; ++n) {
      wgmma_pipeline_head<STAGES>(n, n_tiles, [&](int next) {
        load_k(next);
        load_v(next);
      });
      kt::wgmma_fence();
      turns.mine();
      issue_scores(sk + n % STAGES * TILE_KV);
      turns.yours(false);
      kt::wgmma_wait<0>();
      kt::wgmma_fence_operand(s);
      if (softmax(n)) rescale_o();
      p_to_a();
      kt::wgmma_fence();
      turns.mine();
      issue_pv(sv + n % STAGES * TILE_KV);
      turns.yours(n + 1 == n_tiles);
      kt::wgmma_wait<0>();
      kt::wgmma_fence_operand(acc);
    }
  } else {
    load_k(0);
    kt::cp_async_commit();
#pragma unroll
    for (int st = 1; st < STAGES; ++st) {
      load_k(st);
      load_v(st - 1);
      kt::cp_async_commit();
    }
    // Key tile 0's scores and softmax (O is still 0: no rescale).
    kt::cp_async_wait<STAGES - 1>();
    kt::fence_proxy_async();
    __syncthreads();
    kt::wgmma_fence();
    turns.mine();
    issue_scores(sk);
    turns.yours(false);
    kt::wgmma_wait<0>();
    kt::wgmma_fence_operand(s);
    softmax(0);
    // Step n: its tiles, and the refill of the slots step n - 1 finished with.
    const auto head = [&](int n) {
      kt::cp_async_wait<STAGES - 2>();
      kt::fence_proxy_async();
      __syncthreads();
      load_k(n + STAGES);
      load_v(n + STAGES - 1);
      kt::cp_async_commit();
    };
    // The last step alone issues no next S: every step of the loop issues
    // both products, so no path defines S's registers but its wgmma.
    for (int n = 0; n + 1 < n_tiles; ++n) {
      head(n);
      p_to_a();
      kt::wgmma_fence();
      turns.mine();
      issue_scores(sk + (n + 1) % STAGES * TILE_KV);
      issue_pv(sv + n % STAGES * TILE_KV);
      turns.yours(false);
      kt::wgmma_wait<1>();  // S of tile n + 1; P V of tile n in flight
      kt::wgmma_fence_operand(s);
      const bool moved = softmax(n + 1);
      kt::wgmma_wait<0>();
      kt::wgmma_fence_operand(acc);
      if (moved) rescale_o();
    }
    head(n_tiles - 1);
    p_to_a();
    kt::wgmma_fence();
    turns.mine();
    issue_pv(sv + (n_tiles - 1) % STAGES * TILE_KV);
    turns.yours(true);
    kt::wgmma_wait<0>();
    kt::wgmma_fence_operand(acc);
  }

  store_output<1, DT>(o + b * o_strides.batch + h * o_strides.head, o_strides.seq,
                      lse + (static_cast<long long>(b) * heads + h) * seq, m0 + warp_row0, seq, acc_tile, row_max,
                      row_sum, scale);
}

}  // namespace attention
