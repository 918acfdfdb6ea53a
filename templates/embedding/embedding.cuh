// Token embedding kernels (reference: templates/embedding/reference.hpp).
// Rows of the table and of out, d_out are of type T (float, or
// __nv_bfloat16 in bf16 mixed precision); tokens are int32; d_table and all
// sums are fp32.
//   embedding_fwd           out[t, :] = table[tokens[t], :]
//   embedding_bwd, sorted   deterministic: embedding_index builds, in one
//                           block, the token positions grouped by token id in
//                           position order (a stable counting sort); then
//                           embedding_rows writes each d_table row as the sum
//                           of its tokens' d_out rows in that order. No float
//                           atomics: bit-identical across runs.
//   embedding_bwd, scan     deterministic, one launch: a warp per d_table
//                           row; each block walks the tokens once, THREADS
//                           at a time, marking those of its rows, and each
//                           warp gathers its row's positions in position
//                           order (a ballot per 32 tokens) and sums their
//                           d_out rows in that order: the sorted variant's
//                           sums, bit for bit, with no sort and no workspace.
//                           Every block reads all tokens: made for
//                           vocabularies and batches whose product is modest.
//                           One warp sums all of a row's tokens (as one slot
//                           does in the sorted variant): an id that is a large
//                           share of the batch makes that warp the tail.
//                           With ZERO_FIRST each warp stores zeros over its
//                           row before the walk, so the rows no token hits
//                           (most of them) are written while the tokens are
//                           read, and a row with tokens is written twice.
//   embedding_bwd, atomic   embedding_zero clears d_table, then
//                           embedding_scatter adds each d_out row with fp32
//                           atomicAdd (the order, and so the last bits, vary
//                           between runs).
// A token id outside [0, vocab) never leads to a read or write outside the
// buffers: the forward writes NaN over that token's row of out (so a bad
// batch shows in the loss instead of training on a wrong row), and the
// backward leaves it out of every sum.
//
// Layout of the row kernels: ROW_THREADS consecutive threads share one row
// (of out, or of d_table); a block of THREADS threads holds THREADS /
// ROW_THREADS rows. Thread t of a row moves the vectors of VEC elements
// starting at columns (i * ROW_THREADS + t) * VEC, i = 0, 1, ... The host
// requires dim % VEC == 0 and VEC-aligned row buffers.
#pragma once
#include "common/kt.cuh"

namespace embedding {

KT_DEVICE float quiet_nan() { return __uint_as_float(0x7fc00000u); }

template <int THREADS, int ROW_THREADS, int VEC, class T>
KT_DEVICE void check_layout() {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "a block is whole warps, at most 1024 threads");
  static_assert(ROW_THREADS >= 1 && (ROW_THREADS & (ROW_THREADS - 1)) == 0, "threads per row are a power of two");
  static_assert(THREADS % ROW_THREADS == 0, "a block holds whole rows");
  static_assert(sizeof(T) * VEC <= 16, "a vector access is at most 16 bytes");
}

/// Grid: ceil(rows / (THREADS / ROW_THREADS)) blocks, a row of out per slot.
template <int THREADS,      // threads per block: more rows per block vs more blocks in flight
          int ROW_THREADS,  // threads per row: a row of d_model elements per ROW_THREADS * VEC per step
          int VEC,          // elements per access: wider loads, fewer instructions; dim % VEC == 0
          class T>
__global__ void __launch_bounds__(THREADS)
    embedding_fwd(const int* __restrict__ tokens,  // (rows,)
                  const T* __restrict__ table,     // (vocab, dim)
                  T* __restrict__ out,             // (rows, dim)
                  long long rows, int dim, int vocab) {
  kt::wait_previous_kernel();
  check_layout<THREADS, ROW_THREADS, VEC, T>();
  constexpr int ROWS = THREADS / ROW_THREADS;
  const int t = static_cast<int>(threadIdx.x) % ROW_THREADS;
  const long long row = static_cast<long long>(blockIdx.x) * ROWS + threadIdx.x / ROW_THREADS;
  if (row >= rows) return;
  const int id = tokens[row];
  kt::Vec<T, VEC>* dst = reinterpret_cast<kt::Vec<T, VEC>*>(out + row * dim);
  if (id < 0 || id >= vocab) {
    kt::Vec<T, VEC> nan;
#pragma unroll
    for (int k = 0; k < VEC; ++k) nan.v[k] = kt::from_float<T>(quiet_nan());
    for (int v = t; v < dim / VEC; v += ROW_THREADS) dst[v] = nan;
    return;
  }
  const kt::Vec<T, VEC>* src = reinterpret_cast<const kt::Vec<T, VEC>*>(table + static_cast<long long>(id) * dim);
  for (int v = t; v < dim / VEC; v += ROW_THREADS) dst[v] = src[v];
}

/// Sorted backward, first launch (grid: one block). With counts = the number
/// of valid tokens of each id, writes
///   starts[v] = counts[0] + ... + counts[v - 1], for v in [0, vocab]
///   index[starts[v] + k] = the position of the k-th token (in position order) of id v
/// using `cursor` (vocab,) as scratch. Positions of invalid ids are left out.
template <int THREADS>  // threads per block: the chunk of tokens ranked together
__global__ void __launch_bounds__(THREADS)
    embedding_index(const int* __restrict__ tokens,  // (rows,)
                    int* __restrict__ starts,        // (vocab + 1,)
                    int* __restrict__ cursor,        // (vocab,) scratch
                    int* __restrict__ index,         // (rows,)
                    int rows, int vocab) {
  kt::wait_previous_kernel();
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "a block is whole warps, at most 1024 threads");
  __shared__ int chunk[THREADS];
  __shared__ int partial[THREADS];
  const int k = static_cast<int>(threadIdx.x);
  // Counts, in cursor.
  for (int v = k; v < vocab; v += THREADS) cursor[v] = 0;
  __syncthreads();
  for (int i = k; i < rows; i += THREADS) {
    const int id = tokens[i];
    if (id >= 0 && id < vocab) atomicAdd(cursor + id, 1);  // integer sums: the same whatever the order
  }
  __syncthreads();
  // Exclusive scan of the counts into starts: each thread sums a contiguous
  // span, the spans' sums are scanned in shared memory, then each span is
  // written out.
  const int span = (vocab + THREADS - 1) / THREADS;
  const int begin = k * span < vocab ? k * span : vocab;
  const int end = begin + span < vocab ? begin + span : vocab;
  int sum = 0;
  for (int v = begin; v < end; ++v) sum += cursor[v];
  partial[k] = sum;
  __syncthreads();
  if (k == 0) {
    int running = 0;
    for (int j = 0; j < THREADS; ++j) {
      const int s = partial[j];
      partial[j] = running;
      running += s;
    }
    starts[vocab] = running;
  }
  __syncthreads();
  int running = partial[k];
  for (int v = begin; v < end; ++v) {
    const int count = cursor[v];
    starts[v] = running;
    cursor[v] = running;  // where the next token of id v goes
    running += count;
  }
  __syncthreads();
  // Stable scatter, THREADS tokens at a time: a token's slot is its id's
  // cursor plus the number of earlier tokens of the chunk with the same id;
  // the last of them in the chunk moves the cursor on.
  for (int base = 0; base < rows; base += THREADS) {
    const int i = base + k;
    int id = i < rows ? tokens[i] : -1;
    if (id < 0 || id >= vocab) id = -1;
    chunk[k] = id;
    __syncthreads();
    int rank = 0;
    bool last = true;
    if (id >= 0) {
      for (int j = 0; j < THREADS; ++j) {
        rank += j < k && chunk[j] == id;
        last = last && !(j > k && chunk[j] == id);
      }
      index[cursor[id] + rank] = i;
    }
    __syncthreads();  // every cursor of the chunk is read before one moves
    if (id >= 0 && last) cursor[id] += rank + 1;
    __syncthreads();  // the next chunk overwrites chunk[] and reads the cursors
  }
}

/// sum[q] += vector c + q * stride (VEC elements) of the d_out rows at
/// positions[0 .. n), in that order, for each q < COLS whose column is in
/// the row: both deterministic variants' sums, each column's the same
/// whatever COLS. A row's COLS columns are loaded together, so COLS times as
/// many loads are in flight as with one column a pass.
template <int VEC, int COLS, class T>
KT_DEVICE void add_columns(kt::Vec<float, VEC> (&sum)[COLS], const T* __restrict__ d_out, const int* positions,
                           int n, int c, int stride, int dim) {
  const kt::Vec<T, VEC>* column = reinterpret_cast<const kt::Vec<T, VEC>*>(d_out) + c;
  const int width = dim / VEC;
  // Four rows' loads in flight (two at four columns, eight loads); left to itself, ptxas unrolls further and
  // spills at VEC 1.
#pragma unroll(COLS >= 4 ? 2 : 4)
  for (int j = 0; j < n; ++j) {
    const long long row = static_cast<long long>(positions[j]) * width;
#pragma unroll
    for (int q = 0; q < COLS; ++q) {
      if (c + q * stride >= width) break;
      const kt::Vec<T, VEC> g = column[row + q * stride];
#pragma unroll
      for (int e = 0; e < VEC; ++e) sum[q].v[e] += kt::to_float(g.v[e]);
    }
  }
}

/// Sorted backward, second launch. Grid: ceil(vocab / (THREADS / ROW_THREADS))
/// blocks, a row of d_table per slot: the sum of the d_out rows at
/// index[starts[v]], ..., index[starts[v + 1] - 1], in that order (0 when none).
template <int THREADS, int ROW_THREADS, int VEC,
          int COLS,  // columns a thread sums in one pass over the row's tokens
          class T>
__global__ void __launch_bounds__(THREADS)
    embedding_rows(const T* __restrict__ d_out,      // (rows, dim)
                   const int* __restrict__ starts,   // (vocab + 1,)
                   const int* __restrict__ index,    // (rows,)
                   float* __restrict__ d_table,      // (vocab, dim)
                   int dim, int vocab) {
  kt::wait_previous_kernel();
  check_layout<THREADS, ROW_THREADS, VEC, T>();
  constexpr int ROWS = THREADS / ROW_THREADS;
  const int t = static_cast<int>(threadIdx.x) % ROW_THREADS;
  const long long v = static_cast<long long>(blockIdx.x) * ROWS + threadIdx.x / ROW_THREADS;
  if (v >= vocab) return;
  const int first = starts[v], last = starts[v + 1];
  kt::Vec<float, VEC>* dst = reinterpret_cast<kt::Vec<float, VEC>*>(d_table + v * dim);
  for (int c = t; c < dim / VEC; c += ROW_THREADS * COLS) {
    kt::Vec<float, VEC> sum[COLS];
#pragma unroll
    for (int q = 0; q < COLS; ++q)
#pragma unroll
      for (int k = 0; k < VEC; ++k) sum[q].v[k] = 0.0f;
    add_columns<VEC, COLS>(sum, d_out, index + first, last - first, c, ROW_THREADS, dim);
#pragma unroll
    for (int q = 0; q < COLS; ++q)
      if (c + q * ROW_THREADS < dim / VEC) dst[c + q * ROW_THREADS] = sum[q];
  }
}

/// The scan's batch: a warp adds the d_out rows at positions list[0 .. held),
/// in that order, to its row dst of d_table (to what an earlier batch stored
/// there when `prior`, else to 0).
template <int VEC, int COLS, class T>
KT_DEVICE void add_rows(const T* __restrict__ d_out, const int* list, int held, bool prior,
                        kt::Vec<float, VEC>* __restrict__ dst, int dim, int lane) {
  __syncwarp();  // the warp's positions are in list
  const int width = dim / VEC;
  for (int c = lane; c < width; c += 32 * COLS) {
    kt::Vec<float, VEC> sum[COLS];
#pragma unroll
    for (int q = 0; q < COLS; ++q) {
      if (prior && c + q * 32 < width) {
        sum[q] = dst[c + q * 32];
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) sum[q].v[e] = 0.0f;
      }
    }
    add_columns<VEC, COLS>(sum, d_out, list, held, c, 32, dim);
#pragma unroll
    for (int q = 0; q < COLS; ++q)
      if (c + q * 32 < width) dst[c + q * 32] = sum[q];
  }
  __syncwarp();  // every lane has read list before the warp refills it
}

/// Scan backward (one launch). Grid: ceil(vocab / (THREADS / 32)) blocks; warp
/// w of block b owns d_table row b * THREADS / 32 + w (ROW_THREADS is 32).
/// Token tiles of THREADS are marked with the warp (row of the block) they
/// belong to; a tile with no token of the block's rows costs one load and one
/// barrier. A warp collects its positions (in order) until BATCH - 32 are
/// held, then adds their d_out rows to its row of d_table, in that order (the
/// first batch starts from 0, later ones from what the earlier ones stored).
/// With ZERO_FIRST the row's zeros are stored first, by the lanes that later
/// store its sums (each lane's stores to a column stay in program order).
template <int THREADS, int ROW_THREADS, int VEC,
          bool ZERO_FIRST,  // zeros stored before the walk: its reads overlap them vs rows with tokens written twice
          int COLS,         // columns a lane sums in one pass over a batch of the row's tokens
          class T>
// At least one block an SM: without it ptxas holds the kernel to about 32 registers and spills.
__global__ void __launch_bounds__(THREADS, 1)
    embedding_scan(const int* __restrict__ tokens,  // (rows,)
                   const T* __restrict__ d_out,     // (rows, dim)
                   float* __restrict__ d_table,     // (vocab, dim)
                   int rows, int dim, int vocab) {
  kt::wait_previous_kernel();
  check_layout<THREADS, ROW_THREADS, VEC, T>();
  static_assert(ROW_THREADS == 32, "the scan gives each d_table row one warp");
  constexpr int WARPS = THREADS / 32;
  constexpr int BATCH = 64;  // positions a warp holds before it sums them
  __shared__ int owner[THREADS];        // the block's row of each token of the tile, or -1
  __shared__ int found[WARPS][BATCH];   // each warp's positions, in order
  const int k = static_cast<int>(threadIdx.x), lane = k % 32, warp = k / 32;
  const int first_row = static_cast<int>(blockIdx.x) * WARPS;
  const long long v = static_cast<long long>(first_row) + warp;  // may be >= vocab: no token marks it
  const unsigned below = (1u << lane) - 1u;
  int* list = found[warp];
  int held = 0;
  bool stored = false;  // a batch of this row has been written to d_table
  kt::Vec<float, VEC>* dst = reinterpret_cast<kt::Vec<float, VEC>*>(d_table + v * dim);
  int next = k < rows ? tokens[k] : -1;
  if constexpr (ZERO_FIRST) {
    if (v < vocab) {
      kt::Vec<float, VEC> zero;
#pragma unroll
      for (int e = 0; e < VEC; ++e) zero.v[e] = 0.0f;
      for (int c = lane; c < dim / VEC; c += 32) dst[c] = zero;  // add_rows's columns of each lane
    }
  }
  for (long long base = 0; base < rows; base += THREADS) {
    const int id = next;
    const long long ahead = base + THREADS + k;
    next = ahead < rows ? tokens[ahead] : -1;  // in flight during this tile
    const int row = id >= first_row && id - first_row < WARPS && id < vocab ? id - first_row : -1;
    owner[k] = row;
    if (__syncthreads_or(row >= 0)) {
#pragma unroll 1  // one copy of add_rows, not one a warp of the tile
      for (int s = 0; s < WARPS; ++s) {
        const bool mine = owner[s * 32 + lane] == warp;
        const unsigned hits = __ballot_sync(0xffffffffu, mine);
        if (mine) list[held + __popc(hits & below)] = static_cast<int>(base) + s * 32 + lane;
        held += __popc(hits);
        if (held > BATCH - 32) {
          add_rows<VEC, COLS>(d_out, list, held, stored, dst, dim, lane);
          stored = true;
          held = 0;
        }
      }
    }
    __syncthreads();  // owner[] is rewritten by the next tile
  }
  if (v >= vocab) return;
  if (held > 0 || (!stored && !ZERO_FIRST)) add_rows<VEC, COLS>(d_out, list, held, stored, dst, dim, lane);  // or 0
}

/// Atomic backward, first launch: d_table = 0. Grid: any size (grid-stride).
template <int THREADS>
__global__ void __launch_bounds__(THREADS) embedding_zero(float* __restrict__ d_table,  // (n,)
                                                          long long n) {
  kt::wait_previous_kernel();
  const long long stride = static_cast<long long>(gridDim.x) * THREADS;
  for (long long i = kt::global_thread_x(); i < n; i += stride) d_table[i] = 0.0f;
}

/// Atomic backward, second launch: d_table[tokens[r], :] += d_out[r, :] with
/// fp32 atomicAdd. Grid: ceil(rows / (THREADS / ROW_THREADS)) blocks, a row of
/// d_out per slot.
template <int THREADS, int ROW_THREADS, int VEC, class T>
__global__ void __launch_bounds__(THREADS)
    embedding_scatter(const int* __restrict__ tokens,  // (rows,)
                      const T* __restrict__ d_out,     // (rows, dim)
                      float* __restrict__ d_table,     // (vocab, dim)
                      long long rows, int dim, int vocab) {
  kt::wait_previous_kernel();
  check_layout<THREADS, ROW_THREADS, VEC, T>();
  constexpr int ROWS = THREADS / ROW_THREADS;
  const int t = static_cast<int>(threadIdx.x) % ROW_THREADS;
  const long long row = static_cast<long long>(blockIdx.x) * ROWS + threadIdx.x / ROW_THREADS;
  if (row >= rows) return;
  const int id = tokens[row];
  if (id < 0 || id >= vocab) return;
  const kt::Vec<T, VEC>* src = reinterpret_cast<const kt::Vec<T, VEC>*>(d_out + row * dim);
  float* dst = d_table + static_cast<long long>(id) * dim;
  for (int c = t; c < dim / VEC; c += ROW_THREADS) {
    const kt::Vec<T, VEC> g = src[c];
#pragma unroll
    for (int k = 0; k < VEC; ++k) atomicAdd(dst + c * VEC + k, kt::to_float(g.v[k]));
  }
}

}  // namespace embedding
