// Row softmax kernels (reference: templates/softmax/reference.hpp): what eager
// attention launches between its two GEMMs. x, y, dy, dx are of type T (float,
// or __nv_bfloat16 in bf16 mixed precision); all math is fp32.
//   softmax_fwd  y = softmax(scale * x) over the columns each row sees, 0 elsewhere
//   softmax_bwd  dx = scale * y * (dy - sum(dy * y)) over those columns, 0 elsewhere
// With CAUSAL the rows are stacked (seq, seq) score blocks, cols = seq: row r
// is query i = r % cols and sees columns j <= i; the masked columns are
// neither read nor exponentiated, only written (0).
// Both kernels read each element once, keep it in registers, and write it
// from the same thread: y may be x, and dx may be dy (in place).
//
// Layout: ROW_THREADS consecutive threads share one row; a block of THREADS
// threads holds THREADS / ROW_THREADS rows ("slots"). Thread t of a row owns
// the vectors of VEC elements starting at columns (i * ROW_THREADS + t) * VEC,
// i < ITEMS. The host sets ITEMS = ceil(cols / (ROW_THREADS * VEC)) and
// requires cols % VEC == 0 and VEC-aligned buffers.
#pragma once
#include "common/kt.cuh"

namespace softmax {

using kt::negative_infinity;

template <int THREADS, int ROW_THREADS, int VEC, int ITEMS, class T>
KT_DEVICE void check_layout() {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "a block is whole warps, at most 1024 threads");
  static_assert(ROW_THREADS >= 1 && (ROW_THREADS & (ROW_THREADS - 1)) == 0,
                "threads per row are a power of two, so shuffle groups align with warps");
  static_assert(THREADS % ROW_THREADS == 0, "a block holds whole rows");
  static_assert(sizeof(T) * VEC <= 16, "a vector access is at most 16 bytes");
  static_assert(ITEMS >= 1, "each thread owns at least one vector of its row");
}

/// Columns row `row` sees: all `cols`, or with CAUSAL its query index + 1.
template <bool CAUSAL>
KT_DEVICE int visible_columns(long long row, int cols) {
  return CAUSAL ? static_cast<int>(row % cols) + 1 : cols;
}

/// Grid: ceil(rows / (THREADS / ROW_THREADS)) blocks; block b takes rows
/// b * THREADS / ROW_THREADS, ... (the last block may hold fewer rows).
template <int THREADS,      // threads per block: more rows per block vs more blocks in flight
          int ROW_THREADS,  // threads per row: few keep reductions in shuffles, many cut registers per thread
          int VEC,          // elements per access: wider loads, fewer instructions; cols % VEC == 0
          int ITEMS,        // vectors per thread, ceil(cols / (ROW_THREADS * VEC)): set by the shape
          bool CAUSAL,      // mask columns j > row % cols: set by the problem
          class T>
__global__ void __launch_bounds__(THREADS)
    softmax_fwd(const T* x,  // (rows, cols)
                T* y,        // (rows, cols), may be x
                long long rows, int cols, float scale) {
  check_layout<THREADS, ROW_THREADS, VEC, ITEMS, T>();
  constexpr int ROWS = THREADS / ROW_THREADS;
  __shared__ float warp_partials[THREADS / 32];
  const int t = static_cast<int>(threadIdx.x) % ROW_THREADS;
  const long long row = static_cast<long long>(blockIdx.x) * ROWS + threadIdx.x / ROW_THREADS;
  const bool active = row < rows;  // false in the last block's spare slots, which still join the reductions
  const int visible = active ? visible_columns<CAUSAL>(row, cols) : 0;
  const long long offset = (active ? row : 0) * cols;

  float z[ITEMS][VEC];  // scale * x, then exp(scale * x - max), 0 where masked
  float max = negative_infinity();
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int c = (i * ROW_THREADS + t) * VEC;
    if (c < visible) {
      const kt::Vec<T, VEC> v = *reinterpret_cast<const kt::Vec<T, VEC>*>(x + offset + c);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        z[i][k] = c + k < visible ? scale * kt::to_float(v.v[k]) : negative_infinity();
        max = z[i][k] > max ? z[i][k] : max;
      }
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) z[i][k] = negative_infinity();
    }
  }
  max = kt::row_reduce<THREADS, ROW_THREADS>(max, warp_partials, kt::MaxOp{});
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i)
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      // A masked column's exp is never taken: an inactive slot's max is -inf.
      z[i][k] = (i * ROW_THREADS + t) * VEC + k < visible ? expf(z[i][k] - max) : 0.0f;
      sum += z[i][k];
    }
  sum = kt::row_reduce<THREADS, ROW_THREADS>(sum, warp_partials, kt::SumOp{});
  if (!active) return;
  const float inv = 1.0f / sum;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int c = (i * ROW_THREADS + t) * VEC;
    if (c < cols) {
      kt::Vec<T, VEC> out;
#pragma unroll
      for (int k = 0; k < VEC; ++k) out.v[k] = kt::from_float<T>(z[i][k] * inv);
      *reinterpret_cast<kt::Vec<T, VEC>*>(y + offset + c) = out;
    }
  }
}

/// Grid: as softmax_fwd's.
template <int THREADS, int ROW_THREADS, int VEC, int ITEMS, bool CAUSAL, class T>
__global__ void __launch_bounds__(THREADS)
    softmax_bwd(const T* y,   // (rows, cols) from softmax_fwd
                const T* dy,  // (rows, cols)
                T* dx,        // (rows, cols), may be dy
                long long rows, int cols, float scale) {
  check_layout<THREADS, ROW_THREADS, VEC, ITEMS, T>();
  constexpr int ROWS = THREADS / ROW_THREADS;
  __shared__ float warp_partials[THREADS / 32];
  const int t = static_cast<int>(threadIdx.x) % ROW_THREADS;
  const long long row = static_cast<long long>(blockIdx.x) * ROWS + threadIdx.x / ROW_THREADS;
  const bool active = row < rows;
  const int visible = active ? visible_columns<CAUSAL>(row, cols) : 0;
  const long long offset = (active ? row : 0) * cols;

  float yv[ITEMS][VEC], gv[ITEMS][VEC];  // y and dy, 0 where masked
  float dot = 0.0f;                     // this thread's part of sum(dy * y)
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int c = (i * ROW_THREADS + t) * VEC;
    if (c < visible) {
      const kt::Vec<T, VEC> a = *reinterpret_cast<const kt::Vec<T, VEC>*>(y + offset + c);
      const kt::Vec<T, VEC> g = *reinterpret_cast<const kt::Vec<T, VEC>*>(dy + offset + c);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const bool seen = c + k < visible;
        yv[i][k] = seen ? kt::to_float(a.v[k]) : 0.0f;
        gv[i][k] = seen ? kt::to_float(g.v[k]) : 0.0f;
        dot += yv[i][k] * gv[i][k];
      }
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) yv[i][k] = gv[i][k] = 0.0f;
    }
  }
  dot = kt::row_reduce<THREADS, ROW_THREADS>(dot, warp_partials, kt::SumOp{});
  if (!active) return;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int c = (i * ROW_THREADS + t) * VEC;
    if (c < cols) {
      kt::Vec<T, VEC> out;
#pragma unroll
      for (int k = 0; k < VEC; ++k) out.v[k] = kt::from_float<T>(scale * yv[i][k] * (gv[i][k] - dot));
      *reinterpret_cast<kt::Vec<T, VEC>*>(dx + offset + c) = out;
    }
  }
}

}  // namespace softmax
