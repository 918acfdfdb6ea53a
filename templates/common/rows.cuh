// The layout every row kernel shares (rmsnorm, softmax, cross_entropy; host
// side: templates/common/row_family.hpp): ROW_THREADS consecutive threads
// share one row; a block of THREADS threads holds THREADS / ROW_THREADS rows
// ("slots"); the grid is ceil(rows / (THREADS / ROW_THREADS)) blocks, block b
// taking rows b * THREADS / ROW_THREADS, ... (the last block may hold fewer).
// Accesses are VEC elements of T wide.
//
// Kernels that hold a row in registers ("held" rows: rmsnorm, softmax) give
// thread t of a row the vectors starting at columns (i * ROW_THREADS + t) *
// VEC, i < ITEMS; the host sets ITEMS = ceil(columns / (ROW_THREADS * VEC))
// and requires columns % VEC == 0 and VEC-aligned rows. load_held and
// store_held move such a share between memory and fp32 registers.
#pragma once
#include "common/kt.cuh"

namespace kt {

/// The invariants of the row layout, for kernels that access VEC elements of T at a time.
template <int THREADS, int ROW_THREADS, int VEC, class T>
KT_DEVICE void check_row_layout() {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "a block is whole warps, at most 1024 threads");
  static_assert(ROW_THREADS >= 1 && (ROW_THREADS & (ROW_THREADS - 1)) == 0,
                "threads per row are a power of two, so shuffle groups align with warps");
  static_assert(THREADS % ROW_THREADS == 0, "a block holds whole rows");
  static_assert(sizeof(T) * VEC <= 16, "a vector access is at most 16 bytes");
}

/// A thread's place in the row layout.
struct RowSlot {
  int t;           // the thread's index within its row, 0 .. ROW_THREADS - 1
  long long row;   // the row its slot takes
  bool active;     // row < rows: false in the last block's spare slots
};

/// This thread's slot in a grid over `rows` rows.
template <int THREADS, int ROW_THREADS>
KT_DEVICE RowSlot row_slot(long long rows) {
  const long long row = static_cast<long long>(blockIdx.x) * (THREADS / ROW_THREADS) + threadIdx.x / ROW_THREADS;
  return {static_cast<int>(threadIdx.x) % ROW_THREADS, row, row < rows};
}

/// First column of vector i of thread t's share of a held row.
template <int ROW_THREADS, int VEC>
KT_DEVICE int held_column(int i, int t) {
  return (i * ROW_THREADS + t) * VEC;
}

/// Thread t's share of `row` as fp32: f(element) for columns below
/// `visible`, `fill` for the others, which are never read (visible 0 reads
/// nothing).
template <int ROW_THREADS, int VEC, int ITEMS, class T, class F>
KT_DEVICE void load_held(const T* row, int visible, int t, float fill, F f, float (&out)[ITEMS][VEC]) {
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int c = held_column<ROW_THREADS, VEC>(i, t);
    if (c < visible) {
      const Vec<T, VEC> v = *reinterpret_cast<const Vec<T, VEC>*>(row + c);
#pragma unroll
      for (int k = 0; k < VEC; ++k) out[i][k] = c + k < visible ? f(to_float(v.v[k])) : fill;
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) out[i][k] = fill;
    }
  }
}

/// Writes thread t's share of `row` (`cols` columns): value(i, k), the fp32
/// value of element k of its vector i, rounded to T.
template <int ROW_THREADS, int VEC, int ITEMS, class T, class F>
KT_DEVICE void store_held(T* row, int cols, int t, F value) {
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int c = held_column<ROW_THREADS, VEC>(i, t);
    if (c < cols) {
      Vec<T, VEC> out;
#pragma unroll
      for (int k = 0; k < VEC; ++k) out.v[k] = from_float<T>(value(i, k));
      *reinterpret_cast<Vec<T, VEC>*>(row + c) = out;
    }
  }
}

}  // namespace kt
