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
// Layout: the row layout of common/rows.cuh, rows held in registers: thread t
// of a row owns the vectors of VEC elements starting at columns (i *
// ROW_THREADS + t) * VEC, i < ITEMS. The host sets ITEMS = ceil(cols /
// (ROW_THREADS * VEC)) and requires cols % VEC == 0 and VEC-aligned buffers.
#pragma once
#include "common/rows.cuh"

namespace softmax {

using kt::negative_infinity;

template <int THREADS, int ROW_THREADS, int VEC, int ITEMS, class T>
KT_DEVICE void check_layout() {
  kt::check_row_layout<THREADS, ROW_THREADS, VEC, T>();
  static_assert(ITEMS >= 1, "each thread owns at least one vector of its row");
}

/// This thread's row: its slot, the offset of its first element, and the
/// columns it sees (all `cols`, or with CAUSAL its query index + 1). An
/// inactive slot (the last block's spare) sees none, reads nothing, and
/// still joins the reductions.
struct Row {
  kt::RowSlot slot;
  long long offset;
  int visible;
};
template <int THREADS, int ROW_THREADS, bool CAUSAL>
KT_DEVICE Row this_row(long long rows, int cols) {
  const kt::RowSlot s = kt::row_slot<THREADS, ROW_THREADS>(rows);
  const int visible = !s.active ? 0 : CAUSAL ? static_cast<int>(s.row % cols) + 1 : cols;
  return {s, (s.active ? s.row : 0) * cols, visible};
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
  kt::wait_previous_kernel();
  check_layout<THREADS, ROW_THREADS, VEC, ITEMS, T>();
  __shared__ float warp_partials[THREADS / 32];
  const auto [s, offset, visible] = this_row<THREADS, ROW_THREADS, CAUSAL>(rows, cols);

  float z[ITEMS][VEC];  // scale * x, then exp(scale * x - max), 0 where masked
  kt::load_held<ROW_THREADS, VEC, ITEMS>(x + offset, visible, s.t, negative_infinity(),
                                         [&](float v) { return scale * v; }, z);
  float max = negative_infinity();
#pragma unroll
  for (int i = 0; i < ITEMS; ++i)
#pragma unroll
    for (int k = 0; k < VEC; ++k) max = fmaxf(max, z[i][k]);  // one instruction; a NaN z makes its exp NaN
  max = kt::row_reduce<THREADS, ROW_THREADS>(max, warp_partials, kt::MaxOp{});
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i)
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      // A masked column's exp is never taken: an inactive slot's max is -inf.
      z[i][k] = kt::held_column<ROW_THREADS, VEC>(i, s.t) + k < visible ? kt::exp_approx(z[i][k] - max) : 0.0f;
      sum += z[i][k];
    }
  sum = kt::row_reduce<THREADS, ROW_THREADS>(sum, warp_partials, kt::SumOp{});
  if (!s.active) return;
  const float inv = 1.0f / sum;
  kt::store_held<ROW_THREADS, VEC, ITEMS>(y + offset, cols, s.t, [&](int i, int k) { return z[i][k] * inv; });
}

/// Grid: as softmax_fwd's.
template <int THREADS, int ROW_THREADS, int VEC, int ITEMS, bool CAUSAL, class T>
__global__ void __launch_bounds__(THREADS)
    softmax_bwd(const T* y,   // (rows, cols) from softmax_fwd
                const T* dy,  // (rows, cols)
                T* dx,        // (rows, cols), may be dy
                long long rows, int cols, float scale) {
  kt::wait_previous_kernel();
  check_layout<THREADS, ROW_THREADS, VEC, ITEMS, T>();
  __shared__ float warp_partials[THREADS / 32];
  const auto [s, offset, visible] = this_row<THREADS, ROW_THREADS, CAUSAL>(rows, cols);

  float yv[ITEMS][VEC], gv[ITEMS][VEC];  // y and dy, 0 where masked
  const auto as_is = [](float v) { return v; };
  kt::load_held<ROW_THREADS, VEC, ITEMS>(y + offset, visible, s.t, 0.0f, as_is, yv);
  kt::load_held<ROW_THREADS, VEC, ITEMS>(dy + offset, visible, s.t, 0.0f, as_is, gv);
  float dot = 0.0f;  // this thread's part of sum(dy * y)
#pragma unroll
  for (int i = 0; i < ITEMS; ++i)
#pragma unroll
    for (int k = 0; k < VEC; ++k) dot += yv[i][k] * gv[i][k];
  dot = kt::row_reduce<THREADS, ROW_THREADS>(dot, warp_partials, kt::SumOp{});
  if (!s.active) return;
  // A masked column is 0, not 0 * (0 - dot): NaN where dot is (as PyTorch's masked_fill backward zeroes it).
  const int t = s.t, shown = visible;  // a lambda cannot capture a structured binding
  kt::store_held<ROW_THREADS, VEC, ITEMS>(dx + offset, cols, t, [&](int i, int k) {
    return kt::held_column<ROW_THREADS, VEC>(i, t) + k < shown ? scale * yv[i][k] * (gv[i][k] - dot) : 0.0f;
  });
}

}  // namespace softmax
