// Attention forward kernel, FlashAttention-2 style on mma.sync (reference:
// attention_forward_streaming in templates/attention/reference.hpp).
//   attention_fwd  O = softmax(scale * Q K^T) V per (batch, head), causal or
//                  not, and the row log-sum-exp of the scaled scores (fp32);
//                  query head h reads K/V head h / kv_group (grouped-query
//                  attention when kv_group > 1)
// Inputs and O are bf16 or f16 (T; mma.sync m16n8k16), or fp32 (T = float;
// mma.sync m16n8k8 in tf32, the inputs and P rounded to tf32 as they enter
// the matrix units); scores, softmax statistics and the O accumulator are
// fp32 throughout.
//
// Layout: a block owns BLOCK_M query rows of one (batch, head); each of its
// WARPS warps owns BLOCK_M / WARPS of them (one or two m16 tiles). The block
// walks the keys in tiles of BLOCK_N: K and V tiles land in shared memory by
// cp.async, STAGES tiles in flight, and each warp computes S = Q K^T for its
// rows in registers (Q's fragments held in registers for the whole walk, or
// re-read from the Q tile for every key tile: Q_REGS), updates its running
// row max and sum (online softmax), converts P = exp(S - max) to T (tf32)
// in registers and adds P V into its O accumulator. The (seq, seq) score
// matrix never exists in memory.
//
// Shared memory (dynamic, kt::dynamic_shared): the Q tile, then STAGES K
// tiles, then STAGES V tiles, each row HEAD_DIM elements in 16-byte chunks
// laid out by TileLayout (padded rows or XOR-swizzled chunks):
//   (BLOCK_M + 2 * STAGES * BLOCK_N) * TileLayout::ROW * sizeof(T) bytes.
// Tensors are addressed through element strides (batch, head, seq; head_dim
// contiguous), so (batch, seq, heads, head_dim) and (batch, heads, seq,
// head_dim) both work without a copy; rows start 16-byte aligned (the host
// checks base addresses and strides).
#pragma once
#include "attention/attention_common.cuh"

namespace attention {

/// How far (log2 units) a row's max may pass the base its probabilities are
/// taken against before the warp moves the base: P <= 2^8 keeps fp16's and
/// bf16's relative precision, and sums of up to 2^20 keys stay far from fp32's range.
constexpr float kBaseSlack = 8.0f;

/// Masks the scores of a warp's MT m16 tiles of query rows (from row0) by
/// NT n8 tiles of keys (from n0), S's accumulator fragments: keys past the
/// sequence (a ragged last tile) and, under a causal mask, keys after the
/// query become -inf.
template <int MT, int NT, bool CAUSAL>
KT_DEVICE void mask_scores(float (&s)[MT][NT][4], int row0, int n0, int seq) {
  const int lane = static_cast<int>(kt::lane_id()), g = lane / 4, t = lane % 4;
  const float neg_inf = __uint_as_float(0xff800000u);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = row0 + mt * 16 + g + 8 * (i / 2);
        const int key = n0 + nt * 8 + 2 * t + i % 2;
        if (key >= seq || (CAUSAL && key > row)) s[mt][nt][i] = neg_inf;
      }
}

/// One key tile's online softmax for a warp's MT m16 tiles, in three
/// steps (online_softmax below takes them in turn). A row's base is its
/// running max when the warp last moved its bases: the warp moves them all,
/// and rescales its sums and its O accumulators, only when a row's first key
/// arrives or its max passes its base by more than kBaseSlack (log2 units),
/// so P stays at most 2^kBaseSlack and a tile whose rows' maxima stay near
/// their bases skips the rescale; O and lse are the same either way, as sum
/// and accumulator share the base. row_max holds the raw (unscaled) maxima,
/// row_sum this lane's part of each row's running sum.
///
/// Step 1: the row max over the tile (a row's scores lie in the 4 lanes of
/// its group). Returns whether the warp moves its bases; if so, row_max
/// takes the new bases, row_sum is rescaled, and `rescale(mt, r, factor)`
/// is called with each row's factor for its O accumulators (rescale_rows
/// applies it there and then, or later from factors kept).
template <int MT, int NT, class Rescale>
KT_DEVICE bool move_bases(const float (&s)[MT][NT][4], float (&row_max)[MT][2], float (&row_sum)[MT][2],
                          float scale_log2, Rescale&& rescale) {
  const float neg_inf = __uint_as_float(0xff800000u);
  float tile_max[MT][2];
  bool move = false;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = row_max[mt][r];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      tile_max[mt][r] = mx;
      // A first key: -inf to finite is +inf; still -inf: NaN, which compares false.
      move |= (mx - row_max[mt][r]) * scale_log2 > kBaseSlack;
    }
  if (!__any_sync(0xffffffffu, move)) return false;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float mx = tile_max[mt][r];
      // A row with every key masked so far keeps max -inf: base 0, so exp gives 0, never NaN.
      const float base = mx == neg_inf ? 0.0f : mx * scale_log2;
      const float factor = kt::exp2_approx(row_max[mt][r] * scale_log2 - base);
      row_max[mt][r] = mx;
      row_sum[mt][r] *= factor;
      rescale(mt, r, factor);
    }
  return true;
}

/// Step 2, after a move of the bases: row r of m16 tile mt of O's
/// accumulators (DT n8 tiles) by its factor.
template <int MT, int DT>
KT_DEVICE void rescale_rows(float (&acc)[MT][DT][4], int mt, int r, float factor) {
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) {
    acc[mt][dt][2 * r] *= factor;
    acc[mt][dt][2 * r + 1] *= factor;
  }
}

/// Step 3: S becomes P = exp(S - base) in place, added to the row sums.
template <int MT, int NT>
KT_DEVICE void exp_scores(float (&s)[MT][NT][4], const float (&row_max)[MT][2], float (&row_sum)[MT][2],
                          float scale_log2) {
  const float neg_inf = __uint_as_float(0xff800000u);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float base = row_max[mt][r] == neg_inf ? 0.0f : row_max[mt][r] * scale_log2;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float p = kt::exp2_approx(s[mt][nt][2 * r + e] * scale_log2 - base);
          s[mt][nt][2 * r + e] = p;
          sum += p;
        }
      row_sum[mt][r] += sum;
    }
}

/// The three steps in turn, O's accumulators in registers the warp owns now.
template <int MT, int NT, int DT>
KT_DEVICE void online_softmax(float (&s)[MT][NT][4], float (&row_max)[MT][2], float (&row_sum)[MT][2],
                              float (&acc)[MT][DT][4], float scale_log2) {
  move_bases<MT, NT>(s, row_max, row_sum, scale_log2,
                     [&](int mt, int r, float factor) { rescale_rows<MT, DT>(acc, mt, r, factor); });
  exp_scores<MT, NT>(s, row_max, row_sum, scale_log2);
}

/// O = acc / sum and lse = scale * max + log(sum) of a warp's MT m16 tiles
/// of query rows (from row0) inside the sequence, each row's sum gathered
/// from the 4 lanes of its group: O's rows `o_row_stride` elements apart
/// from `oh`, lse's from `lse_h`.
template <int MT, int DT, class T>
KT_DEVICE void store_output(T* oh, long long o_row_stride, float* lse_h, int row0, int seq,
                            const float (&acc)[MT][DT][4], const float (&row_max)[MT][2],
                            const float (&row_sum)[MT][2], float scale) {
  const int lane = static_cast<int>(kt::lane_id()), g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = row_sum[mt][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int row = row0 + mt * 16 + g + 8 * r;
      if (row < seq) {
        const float inv = 1.0f / sum;
        T* orow = oh + row * o_row_stride;
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
          Pair<T> out;
          out.lo = kt::from_float<T>(acc[mt][dt][2 * r] * inv);
          out.hi = kt::from_float<T>(acc[mt][dt][2 * r + 1] * inv);
          *reinterpret_cast<Pair<T>*>(orow + dt * 8 + 2 * t) = out;
        }
        if (t == 0) lse_h[row] = row_max[mt][r] * scale + logf(sum);
      }
    }
}

/// Grid: (ceil(seq / BLOCK_M), heads, batch); the block of rank r
/// (attention_common.cuh's block_tile, by tile_order) takes query block
/// gridDim.x - 1 - r, so under a causal mask the longest blocks start first.
/// Block: WARPS * 32 threads; dynamic shared memory as in the file header.
/// `scale` > 0, so the running max of the raw scores is that of the scaled
/// ones. The launch bounds ask for one block per SM at least: ptxas may then
/// use up to 255 registers where it would otherwise spill to reach more.
template <int HEAD_DIM,  // 16, 32, 64, 80 or 128: set by the problem
          int BLOCK_M,   // query rows per block: more reuse of each K/V tile vs more blocks in flight
          int BLOCK_N,   // keys per tile: fewer rescales and barriers vs score registers and shared memory
          int WARPS,     // warps per block, BLOCK_M / WARPS rows each: more warps vs more rows (registers) per warp
          int STAGES,    // K/V tiles in flight: load latency hidden vs shared memory
          int LAYOUT,    // K/V tile layout: 0 padded rows (more shared memory), 1 XOR-swizzled chunks (packed)
          bool Q_REGS,   // Q's A fragments: loaded once into registers, or re-read from shared memory per key tile
          bool CAUSAL,   // key j > query i masked: set by the problem
          class T>       // __nv_bfloat16, __half, or float (tf32 matrix units)
__global__ void __launch_bounds__(WARPS * 32, 1)
    attention_fwd(const T* q,       // (batch, seq, heads, head_dim) through q_strides
                  const T* k,       // (batch, seq, heads / kv_group, head_dim) through k_strides
                  const T* v,       // as k, through v_strides
                  T* o,             // through o_strides
                  float* lse,       // (batch, heads, seq)
                  Strides q_strides, Strides k_strides, Strides v_strides, Strides o_strides,
                  int seq, int heads, int kv_group, float scale, int tile_order) {
  kt::wait_previous_kernel();
  static_assert(HEAD_DIM % 16 == 0 && HEAD_DIM >= 16 && HEAD_DIM <= 256,
                "the head dim is whole k steps of Q K^T and whole n16 pairs of P V");
  static_assert(WARPS >= 1 && WARPS * 32 <= 1024, "a block is 1 to 32 warps");
  static_assert(BLOCK_M % (16 * WARPS) == 0, "each warp owns whole m16 tiles of the block's query rows");
  static_assert(BLOCK_N % 16 == 0, "a key tile is whole k16 steps of P V (and n16 pairs of Q K^T)");
  static_assert(STAGES >= 1, "at least the tile being computed is in shared memory");
  constexpr int THREADS = WARPS * 32;
  constexpr int MT = BLOCK_M / (16 * WARPS);  // m16 tiles per warp
  constexpr bool TF32 = sizeof(T) == 4;       // fp32 inputs: m16n8k8 in tf32, fragments by plain loads
  constexpr int KSTEPS = HEAD_DIM / Mma<T>::K;  // k steps of Q K^T
  constexpr int NT = BLOCK_N / 8;             // n8 tiles of S
  constexpr int DT = HEAD_DIM / 8;            // n8 tiles of O
  using Layout = TileLayout<HEAD_DIM, LAYOUT, 16 / static_cast<int>(sizeof(T))>;
  constexpr int TILE_Q = BLOCK_M * Layout::ROW;
  constexpr int TILE_KV = BLOCK_N * Layout::ROW;
  const float neg_inf = __uint_as_float(0xff800000u);
  const float scale_log2 = scale * 1.4426950408889634f;  // exp(scale * x) = exp2(scale_log2 * x)

  T* sq = kt::dynamic_shared<T>();  // (BLOCK_M, HEAD_DIM)
  T* sk = sq + TILE_Q;              // STAGES x (BLOCK_N, HEAD_DIM)
  T* sv = sk + STAGES * TILE_KV;    // STAGES x (BLOCK_N, HEAD_DIM)

  const BlockTile tile = block_tile<CAUSAL>(tile_order);
  const int m_block = static_cast<int>(gridDim.x) - 1 - tile.rank;
  const int h = tile.head, b = tile.batch;
  const int m0 = m_block * BLOCK_M;
  const T* qh = q + b * q_strides.batch + h * q_strides.head;
  const T* kh = k + b * k_strides.batch + h / kv_group * k_strides.head;
  const T* vh = v + b * v_strides.batch + h / kv_group * v_strides.head;
  const int rows_end = min(m0 + BLOCK_M, seq);
  // Key tiles this block sees: under a causal mask none past its last row.
  const int n_tiles = ((CAUSAL ? rows_end : seq) + BLOCK_N - 1) / BLOCK_N;

  const int lane = static_cast<int>(kt::lane_id()), warp = static_cast<int>(kt::warp_id());
  const int g = lane / 4, t = lane % 4;  // the mma fragments' group and thread in group
  const int warp_row0 = warp * MT * 16;  // first of the warp's rows within the block

  // Prologue: Q joins the first tile's group; tiles 0 .. STAGES-2 in flight.
  load_tile<BLOCK_M, HEAD_DIM, LAYOUT, THREADS>(sq, qh, q_strides.seq, m0, seq);
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < n_tiles) {
      load_tile<BLOCK_N, HEAD_DIM, LAYOUT, THREADS>(sk + s * TILE_KV, kh, k_strides.seq, s * BLOCK_N, seq);
      load_tile<BLOCK_N, HEAD_DIM, LAYOUT, THREADS>(sv + s * TILE_KV, vh, v_strides.seq, s * BLOCK_N, seq);
    }
    kt::cp_async_commit();
  }

  // A fragments of the warp's Q rows: every k step's, loaded once (Q_REGS),
  // or one k step's at a time, re-read from the Q tile for every key tile.
  constexpr int QF = Q_REGS ? KSTEPS : 1;
  unsigned qf[MT][QF][4];
  const auto load_q = [&](unsigned (&a)[4], int mt, int ks) {
    if constexpr (TF32) {
      // a0..a3: (row g, column t), (g + 8, t), (g, t + 4), (g + 8, t + 4) of the m16 x k8 tile.
      const int row = warp_row0 + mt * 16 + g, col = ks * 8 + t;
      a[0] = kt::float_to_tf32(sq[Layout::offset(row, col)]);
      a[1] = kt::float_to_tf32(sq[Layout::offset(row + 8, col)]);
      a[2] = kt::float_to_tf32(sq[Layout::offset(row, col + 4)]);
      a[3] = kt::float_to_tf32(sq[Layout::offset(row + 8, col + 4)]);
    } else {
      // Matrices: rows 0-7 / 8-15 of the m16 tile, columns ks*16 + 0 / + 8.
      kt::ldmatrix_x4(a, sq + Layout::offset(warp_row0 + mt * 16, lane % 8 + 8 * (lane / 8 % 2),
                                             ks * 16 + 8 * (lane / 16)));
    }
  };
  float acc[MT][DT][4];        // O accumulator: row g (elements 0, 1) and g + 8 (2, 3) of each m16 tile
  float row_max[MT][2];        // the raw score rows g and g + 8 take P against (see kBaseSlack)
  float row_sum[MT][2];        // this lane's part of the running sum of exp(scale * (score - row_max))
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][dt][i] = 0.0f;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_max[mt][r] = neg_inf;
      row_sum[mt][r] = 0.0f;
    }
  }

  for (int n = 0; n < n_tiles; ++n) {
    // Tile n (and, for n = 0, Q) has landed; the tile STAGES - 1 ahead refills tile n - 1's stage.
    pipeline_head<STAGES>(n, n_tiles, [&](int next) {
      const int s = next % STAGES;
      load_tile<BLOCK_N, HEAD_DIM, LAYOUT, THREADS>(sk + s * TILE_KV, kh, k_strides.seq, next * BLOCK_N, seq);
      load_tile<BLOCK_N, HEAD_DIM, LAYOUT, THREADS>(sv + s * TILE_KV, vh, v_strides.seq, next * BLOCK_N, seq);
    });

    if (Q_REGS && n == 0) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int ks = 0; ks < QF; ++ks) load_q(qf[mt][ks], mt, ks);
    }
    const T* skt = sk + n % STAGES * TILE_KV;
    const T* svt = sv + n % STAGES * TILE_KV;
    const int n0 = n * BLOCK_N;

    // S = Q K^T: B fragments straight from K's rows (key = n, head dim = k).
    float s[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) s[mt][nt][i] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
      if constexpr (!Q_REGS) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) load_q(qf[mt][0], mt, ks);
      }
      const int qs = Q_REGS ? ks : 0;
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        unsigned kf[4];  // B fragments of key tiles 2 np (kf[0..1]) and 2 np + 1 (kf[2..3])
        if constexpr (TF32) {
          // b0, b1: (k t, n g) and (k t + 4, n g), i.e. K[key g][column t], K[key g][column t + 4].
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int key = np * 16 + half * 8 + g, col = ks * 8 + t;
            kf[2 * half] = kt::float_to_tf32(skt[Layout::offset(key, col)]);
            kf[2 * half + 1] = kt::float_to_tf32(skt[Layout::offset(key, col + 4)]);
          }
        } else {
          // Matrices: keys np*16 + 0-7 at columns ks*16 + 0 / + 8, then keys + 8-15.
          kt::ldmatrix_x4(kf, skt + Layout::offset(np * 16, lane % 8 + 8 * (lane / 16), ks * 16 + 8 * (lane / 8 % 2)));
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          Mma<T>::run(s[mt][2 * np], qf[mt][qs], kf);
          Mma<T>::run(s[mt][2 * np + 1], qf[mt][qs], kf + 2);
        }
      }
    }

    // Masks: keys past the sequence (the ragged last tile) and, under a
    // causal mask, keys after the query (tiles that reach past the block's first row).
    if (n0 + BLOCK_N > seq || (CAUSAL && n0 + BLOCK_N - 1 > m0))
      mask_scores<MT, NT, CAUSAL>(s, m0 + warp_row0, n0, seq);

    online_softmax<MT, NT, DT>(s, row_max, row_sum, acc, scale_log2);

    // O += P V: P's accumulator fragments are the A fragments of the next
    // mma (keys = k); V's B fragments by transposed loads of its rows.
    if constexpr (TF32) {
      // One k8 step per key tile of 8. Lane (g, t) holds P's keys 2t and 2t + 1
      // (rows g, g + 8) where the A fragment wants k = t and t + 4: the step
      // takes its keys in the order 0, 2, 4, 6, 1, 3, 5, 7 (k = t is key 2t,
      // k = t + 4 is key 2t + 1), for P and V alike, which leaves the sum as it is.
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        unsigned pa[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) acc_to_a<T>(pa[mt], s[mt], nt);
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
          // b0, b1: (k t, n g), (k t + 4, n g) = V[key 2t][column g], V[key 2t + 1][column g].
          const int key = nt * 8 + 2 * t, col = dt * 8 + g;
          const unsigned vf[2] = {kt::float_to_tf32(svt[Layout::offset(key, col)]),
                                  kt::float_to_tf32(svt[Layout::offset(key + 1, col)])};
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) Mma<T>::run(acc[mt][dt], pa[mt], vf);
        }
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
        unsigned pa[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) acc_to_a<T>(pa[mt], s[mt], kk);
#pragma unroll
        for (int dp = 0; dp < DT / 2; ++dp) {
          // Matrices: keys kk*16 + 0-7 / + 8-15 at columns dp*16, then the same at dp*16 + 8.
          unsigned vf[4];
          kt::ldmatrix_x4_trans(
              vf, svt + Layout::offset(kk * 16, lane % 8 + 8 * (lane / 8 % 2), dp * 16 + 8 * (lane / 16)));
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            Mma<T>::run(acc[mt][2 * dp], pa[mt], vf);
            Mma<T>::run(acc[mt][2 * dp + 1], pa[mt], vf + 2);
          }
        }
      }
    }
  }

  store_output<MT, DT>(o + b * o_strides.batch + h * o_strides.head, o_strides.seq,
                       lse + (static_cast<long long>(b) * heads + h) * seq, m0 + warp_row0, seq, acc, row_max,
                       row_sum, scale);
}

}  // namespace attention
