// Attention backward's dK/dV pass on Hopper's warpgroup products (sm_90a;
// the family's `mma` 1 and 2), with dQ by fp32 atomics: the math of
// attention_bwd.cuh's attention_bwd_dkdv (same arguments, same pre-kernel and
// dQ conversion around it), its five products issued as wgmma by whole
// warpgroups. Per (query head, query tile) step, warpgroup w's 64 keys:
//   S^T = K Q^T, dP^T = V dO^T     wgmma_ss, K (V) and Q (dO) K-major
//   dV += P^T dO, dK += dS^T Q     wgmma_rs: P^T, dS^T from registers (the
//                                  accumulator fragments of S^T, dP^T), dO
//                                  and Q N-major
//   dQ(tile) += dS K               wgmma_ss: dS^T staged in shared memory,
//                                  read M-major, K N-major; added to the
//                                  fp32 accumulator by atomics, each thread
//                                  its fragment's pairs (red.v2), or with
//                                  DQ_BULK the tile's rows staged in shared
//                                  memory and added one bulk reduction a row
//                                  (cp.reduce.async.bulk: whole lines, issued
//                                  by one thread a row, whose reads of the
//                                  stage are waited for a step later)
// 16-bit inputs (bf16, f16); head dims 64 and 128.
//
// In turn (the family's `mma` 1) a step's S^T and dP^T products are one
// group, waited for before any of P^T's exponentials. Overlapped (`mma` 2,
// FlashAttention-3's intra-warpgroup pipelining within a step): S^T and
// dP^T are two groups, P^T's exponentials run while dP^T's product does,
// and dV's product (which needs P^T alone) while dS^T's arithmetic does,
// so the special function unit and the tensor cores work side by side.
// With PINGPONG (the family's `pingpong`, two warpgroups) the warpgroups
// issue their products in turns, S^T and dP^T as one turn, dV and dK as
// the next (attention_common.cuh's Turns, as the forward's), so
// one's exponentials and dS^T arithmetic run beside the other's products;
// the dQ products, after the block's barrier, are issued together.
//
// Layout: a block owns BLOCK_N = 64 * WARPGROUPS keys of one K/V head;
// warpgroup w's warps own 16 of its keys each (the rows of S^T, dP^T and the
// dK, dV accumulators). The block walks (query head of its group) x (query
// tile of BLOCK_M), Q and dO tiles and their rows' lse and D arriving by
// cp.async, STAGES in flight.
//
// Shared memory (dynamic; attention_wgmma.cuh's PanelLayout, 1024-byte
// aligned tiles): K, V (BLOCK_N rows), STAGES x (Q, dO) (BLOCK_M rows), dS^T
// (BLOCK_N rows of BLOCK_M queries), then STAGES x (lse, D) of BLOCK_M
// queries (fp32), then with DQ_BULK the dQ stage (BLOCK_M rows of HEAD_DIM
// + 8 fp32: the pad puts the rows of a warp's pairs on distinct banks):
//   (2 BLOCK_N + 2 STAGES BLOCK_M) HEAD_DIM sizeof(T) + BLOCK_N BLOCK_M
//   sizeof(T) + STAGES 2 BLOCK_M 4 [+ BLOCK_M (HEAD_DIM + 8) 4] bytes.
#pragma once
// attention_bwd.cuh: the step walk (QuerySteps, load_rows), store_rows;
// attention_wgmma.cuh: PanelLayout, load_panels, wgmma_pipeline_head.
#include "attention/attention_bwd.cuh"
#include "attention/attention_wgmma.cuh"

namespace attention {

/// Grid: (ceil(seq / BLOCK_N), kv_heads, batch), the key blocks in the order
/// of block_tile(tile_order) as attention_bwd_dkdv's; block: WARPGROUPS * 128
/// threads. Arguments as attention_bwd_dkdv's with DQ_ATOMIC.
template <int HEAD_DIM,    // 64 or 128: set by the problem
          int BLOCK_M,     // queries per tile walked (the N of S^T): 64 or 128
          int BLOCK_N,     // keys per block: 64 * WARPGROUPS
          int WARPGROUPS,  // 1 or 2
          int STAGES,      // Q/dO tiles in flight
          bool OVERLAP,    // P^T's exponentials beside dP^T's product, dS^T's arithmetic beside dV's
          bool DQ_BULK,    // dQ's rows staged and added by bulk reductions (else each thread's pairs by red.v2)
          bool PINGPONG,   // the two warpgroups' products in turns, one's exponentials beside the other's products
          bool CAUSAL,     // key j > query i masked: set by the problem
          class T>         // __nv_bfloat16 or __half
__global__ void __launch_bounds__(WARPGROUPS * 128, 1)
    attention_bwd_dkdv_wgmma(const T* q, const T* k, const T* v, const T* dout, const float* lse,
                             const float* delta, float* dq_accum, T* dk, T* dv, Strides q_strides,
                             Strides k_strides, Strides v_strides, Strides do_strides, Strides dk_strides,
                             Strides dv_strides, int seq, int heads, int kv_group, float scale, int tile_order) {
  kt::wait_previous_kernel();
  static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "head dims 64 and 128: whole 128-byte panels");
  static_assert(BLOCK_N == 64 * WARPGROUPS, "each warpgroup owns 64 keys, a wgmma's M");
  static_assert(BLOCK_M == 64 || BLOCK_M == 128, "a query tile is whole 64-query panels of dS^T");
  static_assert(STAGES >= 1, "at least the tile being computed is in shared memory");
  static_assert(!PINGPONG || WARPGROUPS == 2, "two warpgroups take turns");
  constexpr int THREADS = WARPGROUPS * 128;
  constexpr int MN = BLOCK_M / 8;   // n8 blocks of S^T, dP^T
  constexpr int DT = HEAD_DIM / 8;  // n8 blocks of dK, dV
  using KVLayout = PanelLayout<BLOCK_N, HEAD_DIM>;
  using QLayout = PanelLayout<BLOCK_M, HEAD_DIM>;
  using DsLayout = PanelLayout<BLOCK_N, BLOCK_M>;  // dS^T: (keys, queries)
  constexpr int TILE_N = BLOCK_N * HEAD_DIM, TILE_M = BLOCK_M * HEAD_DIM;
  // dQ's pieces: 64-query blocks of the tile by DQ_N columns of the head
  // dim, one warpgroup a piece: at most 64 columns (32 accumulator
  // registers beside dK's and dV's: with 128 a warpgroup spilled), fewer
  // where more warpgroups than 64-query blocks share the head dim.
  constexpr int Q_BLOCKS = BLOCK_M / 64;
  constexpr int SPLIT = WARPGROUPS > Q_BLOCKS ? WARPGROUPS / Q_BLOCKS : 1;
  constexpr int DQ_N = HEAD_DIM / SPLIT < 64 ? HEAD_DIM / SPLIT : 64;
  constexpr int PIECES = Q_BLOCKS * (HEAD_DIM / DQ_N);
  const float log2e = 1.4426950408889634f;
  const float scale_log2 = scale * log2e;

  T* sk = kt::dynamic_shared<T>();
  T* sv = sk + TILE_N;
  T* sq = sv + TILE_N;              // STAGES x (BLOCK_M, HEAD_DIM)
  T* sdo = sq + STAGES * TILE_M;    // STAGES x (BLOCK_M, HEAD_DIM)
  T* sds = sdo + STAGES * TILE_M;   // (BLOCK_N, BLOCK_M)
  float* srows = reinterpret_cast<float*>(sds + BLOCK_N * BLOCK_M);  // STAGES x (lse, D)
  constexpr int DQ_STRIDE = HEAD_DIM + 8;                             // floats a row of the dQ stage
  float* sdq = srows + STAGES * 2 * BLOCK_M;                          // DQ_BULK: (BLOCK_M, DQ_STRIDE)

  const BlockTile tile = block_tile<CAUSAL>(tile_order);  // rank 0: the first keys, which most queries see
  const int n0 = tile.rank * BLOCK_N;
  const int kvh = tile.head, b = tile.batch;
  const int lane = static_cast<int>(kt::lane_id()), warp = static_cast<int>(kt::warp_id());
  const int g = lane / 4, t = lane % 4;
  const int group = warp / 4;           // the warpgroup
  const int warp_key0 = warp * 16;      // the warp's first key within the block
  const int group_warp_row = warp % 4 * 16;  // the warp's first row within a wgmma's 64
  const T* kh = k + b * k_strides.batch + kvh * k_strides.head;
  const T* vh = v + b * v_strides.batch + kvh * v_strides.head;
  const QuerySteps<BLOCK_M, CAUSAL> steps(n0, seq, b, heads, kvh * kv_group, kv_group);
  const int total = steps.total;
  auto load_step = [&](int step, const auto& at) {
    const int s = step % STAGES;
    load_panels<BLOCK_M, HEAD_DIM, THREADS>(sq + s * TILE_M, q + b * q_strides.batch + at.h * q_strides.head,
                                            q_strides.seq, at.m0, seq);
    load_panels<BLOCK_M, HEAD_DIM, THREADS>(sdo + s * TILE_M, dout + b * do_strides.batch + at.h * do_strides.head,
                                            do_strides.seq, at.m0, seq);
    load_rows<BLOCK_M, THREADS>(srows + s * 2 * BLOCK_M, lse, delta, at.row, seq - at.m0);
  };
  load_panels<BLOCK_N, HEAD_DIM, THREADS>(sk, kh, k_strides.seq, n0, seq);
  load_panels<BLOCK_N, HEAD_DIM, THREADS>(sv, vh, v_strides.seq, n0, seq);
  auto at = steps.first;
  auto loading = at;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < total) load_step(s, loading);
    loading = steps.next(loading);
    kt::cp_async_commit();
  }

  const Turns<PINGPONG> turns{group};
  turns.start();

  float dk_acc[DT * 4], dv_acc[DT * 4];  // rows: the warp's 16 keys; as wgmma's D fragment
#pragma unroll
  for (int i = 0; i < DT * 4; ++i) dk_acc[i] = dv_acc[i] = 0.0f;

  for (int step = 0; step < total; ++step) {
    wgmma_pipeline_head<STAGES>(step, total, [&](int ahead) { load_step(ahead, loading); });
    loading = steps.next(loading);
    const int m0 = at.m0;
    const T* sqt = sq + step % STAGES * TILE_M;
    const T* sdot = sdo + step % STAGES * TILE_M;

    // S^T = K Q^T and dP^T = V dO^T over the head dim's k steps: one group
    // in turn, overlapped two (S^T's first).
    float s[MN * 4], dp[MN * 4];
    const auto issue_scores = [&](float(&d)[MN * 4], const T* rows, const T* cols) {
#pragma unroll
      for (int ks = 0; ks < HEAD_DIM / 16; ++ks)
        kt::wgmma_ss<BLOCK_M, T, 0, 0>(d, kt::wgmma_desc(rows + KVLayout::offset(group * 64, ks * 16), 1, 16, 1024),
                                       kt::wgmma_desc(cols + QLayout::offset(0, ks * 16), 1, 16, 1024), ks > 0);
    };
    kt::wgmma_fence();
    turns.mine();
    issue_scores(s, sk, sqt);
    if constexpr (OVERLAP) kt::wgmma_commit();
    issue_scores(dp, sv, sdot);
    kt::wgmma_commit();
    turns.yours(false);
    kt::wgmma_wait<OVERLAP ? 1 : 0>();
    kt::wgmma_fence_operand(s);

    // P^T = exp(scale * S^T - lse), zero where the query or the key is past
    // the sequence or (causal) the query is before the key: a key past it
    // has P^T = exp(-lse), which overflows T for a very negative lse, and
    // inf times K's zero row would be NaN in dQ.
    const bool masked_tile = m0 + BLOCK_M > seq || n0 + BLOCK_N > seq || (CAUSAL && m0 < n0 + BLOCK_N - 1);
    const float* lse_s = srows + step % STAGES * 2 * BLOCK_M + 2 * t;
#pragma unroll
    for (int nt = 0; nt < MN; ++nt) {
      const float2 lse2 = *reinterpret_cast<const float2*>(lse_s + nt * 8);
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int query = m0 + nt * 8 + 2 * t + e;
        const float l2 = (e == 0 ? lse2.x : lse2.y) * log2e;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int i = 4 * nt + 2 * r + e;
          float p = kt::exp2_approx(s[i] * scale_log2 - l2);
          if (masked_tile) {
            const int key = n0 + warp_key0 + g + 8 * r;
            if (query >= seq || key >= seq || (CAUSAL && query < key)) p = 0.0f;
          }
          s[i] = p;
        }
      }
    }
    // A fragments of P^T and dS^T, one k16 step each: wgmma's D fragment is mma.sync's accumulator.
    unsigned pa[BLOCK_M / 16][4], dsa[BLOCK_M / 16][4];
#pragma unroll
    for (int kk = 0; kk < BLOCK_M / 16; ++kk) acc_to_a<T>(pa[kk], *reinterpret_cast<const float(*)[MN][4]>(s), kk);

    // dV += P^T dO and dK += dS^T Q (unscaled): k = the tile's queries, 16
    // rows of the Q and dO tiles a step; the head dim's second panel at LBO.
    const auto issue_dv = [&] {
#pragma unroll
      for (int kk = 0; kk < BLOCK_M / 16; ++kk)
        kt::wgmma_rs<HEAD_DIM, T, 1>(
            dv_acc, pa[kk], kt::wgmma_desc(sdot + QLayout::offset(kk * 16, 0), 1, QLayout::PANEL_BYTES, 1024), true);
    };
    if constexpr (OVERLAP) {
      kt::wgmma_fence();
      turns.mine();  // held through dS^T's arithmetic, until dK's product is issued too
      issue_dv();
      kt::wgmma_commit();
      kt::wgmma_wait<1>();  // dP^T's product; dV's may still run
    }
    kt::wgmma_fence_operand(dp);

    // dS^T = P^T * (dP^T - D) (zero where P^T is).
#pragma unroll
    for (int nt = 0; nt < MN; ++nt) {
      const float2 d2 = *reinterpret_cast<const float2*>(lse_s + BLOCK_M + nt * 8);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int i = 4 * nt + 2 * r;
        dp[i] = s[i] * (dp[i] - d2.x);
        dp[i + 1] = s[i + 1] * (dp[i + 1] - d2.y);
      }
    }
#pragma unroll
    for (int kk = 0; kk < BLOCK_M / 16; ++kk) acc_to_a<T>(dsa[kk], *reinterpret_cast<const float(*)[MN][4]>(dp), kk);
    kt::wgmma_fence();
    if constexpr (!OVERLAP) {
      turns.mine();
      issue_dv();
    }
#pragma unroll
    for (int kk = 0; kk < BLOCK_M / 16; ++kk)
      kt::wgmma_rs<HEAD_DIM, T, 1>(
          dk_acc, dsa[kk], kt::wgmma_desc(sqt + QLayout::offset(kk * 16, 0), 1, QLayout::PANEL_BYTES, 1024), true);
    kt::wgmma_commit();
    turns.yours(step + 1 == total);

    // dS^T to shared memory as T (the previous step's dQ products are done:
    // each waited for them before this step's head barrier).
#pragma unroll
    for (int nt = 0; nt < MN; ++nt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        Pair<T> out;
        out.lo = kt::from_float<T>(dp[4 * nt + 2 * r]);
        out.hi = kt::from_float<T>(dp[4 * nt + 2 * r + 1]);
        *reinterpret_cast<Pair<T>*>(sds + DsLayout::offset(warp_key0 + g + 8 * r, nt * 8 + 2 * t)) = out;
      }
    kt::fence_proxy_async();
    if constexpr (DQ_BULK) kt::bulk_wait_read<0>();  // the previous step's reductions have read the dQ stage
    __syncthreads();

    // dQ(tile) += dS K: A = dS^T's rows read M-major (64 queries of a panel),
    // B = K N-major, k = the block's keys.
    for (int piece = group; piece < PIECES; piece += WARPGROUPS) {
      const int qb = piece % Q_BLOCKS, col0 = piece / Q_BLOCKS * DQ_N;
      float c[DQ_N / 2];
      kt::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BLOCK_N / 16; ++kk)
        kt::wgmma_ss<DQ_N, T, 1, 1>(
            c, kt::wgmma_desc(sds + DsLayout::offset(kk * 16, qb * 64), 1, DsLayout::PANEL_BYTES, 1024),
            kt::wgmma_desc(sk + KVLayout::offset(kk * 16, col0), 1, KVLayout::PANEL_BYTES, 1024), kk > 0);
      kt::wgmma_commit();
      kt::wgmma_wait<0>();
      kt::wgmma_fence_operand(c);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int query = qb * 64 + group_warp_row + g + 8 * r;  // of the tile
        if constexpr (DQ_BULK) {
          float* row = sdq + query * DQ_STRIDE + col0 + 2 * t;
#pragma unroll
          for (int j = 0; j < DQ_N / 8; ++j)
            *reinterpret_cast<float2*>(row + 8 * j) = float2{c[4 * j + 2 * r], c[4 * j + 2 * r + 1]};
        } else if (m0 + query < seq) {
          float* row = dq_accum + (at.row + query) * HEAD_DIM + col0 + 2 * t;
#pragma unroll
          for (int j = 0; j < DQ_N / 8; ++j) kt::atomic_add2(row + 8 * j, c[4 * j + 2 * r], c[4 * j + 2 * r + 1]);
        }
      }
    }
    if constexpr (DQ_BULK) {
      // Every piece staged, then one bulk reduction a row inside the sequence.
      kt::fence_proxy_async();
      __syncthreads();
      const int rows = seq - m0 < BLOCK_M ? seq - m0 : BLOCK_M;
      for (int query = static_cast<int>(threadIdx.x); query < rows; query += THREADS)
        kt::bulk_reduce_add(dq_accum + (at.row + query) * HEAD_DIM, sdq + query * DQ_STRIDE, HEAD_DIM * 4);
      kt::bulk_commit();
    }
    kt::wgmma_wait<0>();  // dV and dK's products of the step (and the tiles they read) are done
    kt::wgmma_fence_operand(dk_acc);
    kt::wgmma_fence_operand(dv_acc);
    at = steps.next(at);
  }

  // dK = scale * dS^T Q, dV = P^T dO, for the keys inside the sequence.
  T* dkh = dk + b * dk_strides.batch + kvh * dk_strides.head;
  T* dvh = dv + b * dv_strides.batch + kvh * dv_strides.head;
  store_rows<DT>(dkh, dk_strides.seq, n0 + warp_key0, seq, *reinterpret_cast<const float(*)[DT][4]>(dk_acc), scale);
  store_rows<DT>(dvh, dv_strides.seq, n0 + warp_key0, seq, *reinterpret_cast<const float(*)[DT][4]>(dv_acc), 1.0f);
  if constexpr (DQ_BULK) kt::bulk_wait_read<0>();  // the block's shared memory outlives the reductions' reads
}

}  // namespace attention
