// RMSNorm kernels (reference: templates/rmsnorm/reference.hpp). Activations x,
// y, dy, dx are of type T (float, or __nv_bfloat16 in bf16 mixed precision);
// the weight w, rstd and dw are fp32, and all math is fp32.
//   rmsnorm_fwd        y = x * rstd * w per row, rstd = 1/sqrt(mean(x^2) + eps)
//                      written for the backward
//   rmsnorm_bwd        dx per row, and each block's partial sum of dw over its rows
//   rmsnorm_dw_reduce  dw = the sum of the partials in block order
//   residual_rmsnorm_fwd  h = x + r, then y, rstd as rmsnorm_fwd on h (one pass)
//   residual_rmsnorm_bwd  dh = dstream + rmsnorm_bwd's dx on h; dw partials as rmsnorm_bwd
// dw is reduced in a fixed order (per-thread rows, the block's rows in slot
// order, then the partials in block order), so results are bitwise repeatable
// for a given config: no float atomics.
//
// Layout: the row layout of common/rows.cuh, rows held in registers: thread
// t of a row owns the vectors of VEC elements starting at columns (i *
// ROW_THREADS + t) * VEC, i < ITEMS, so each row is read from memory once.
// The host sets ITEMS = ceil(dim / (ROW_THREADS * VEC)) and requires dim %
// VEC == 0 and VEC-aligned buffers.
#pragma once
#include "common/rows.cuh"

namespace rmsnorm {

template <int THREADS, int ROW_THREADS, int VEC, int ITEMS, class T>
KT_DEVICE void check_layout() {
  kt::check_row_layout<THREADS, ROW_THREADS, VEC, T>();
  static_assert(ITEMS >= 1, "each thread owns at least one vector of its row");
}

/// Both forward kernels: with RESIDUAL the row normalised is x + r, written to h.
template <int THREADS, int ROW_THREADS, int VEC, int ITEMS, bool RESIDUAL, class T>
KT_DEVICE void forward_rows(const T* x, const T* r, const float* w, T* h, T* y, float* rstd, long long rows, int dim,
                            float eps) {
  check_layout<THREADS, ROW_THREADS, VEC, ITEMS, T>();
  __shared__ float warp_sums[THREADS / 32];
  const kt::RowSlot slot = kt::row_slot<THREADS, ROW_THREADS>(rows);
  const int t = slot.t;
  const long long row = slot.row;
  const bool active = slot.active;  // false in the last block's spare slots, which still join the barriers
  const T* xr = x + (active ? row : 0) * dim;

  kt::Vec<T, VEC> xv[ITEMS];
  float sum_sq = 0.0f;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int c = (i * ROW_THREADS + t) * VEC;
    if (active && c < dim) {
      xv[i] = *reinterpret_cast<const kt::Vec<T, VEC>*>(xr + c);
      if constexpr (RESIDUAL) {
        const kt::Vec<T, VEC> rv = *reinterpret_cast<const kt::Vec<T, VEC>*>(r + (xr - x) + c);
#pragma unroll
        for (int k = 0; k < VEC; ++k) xv[i].v[k] = kt::from_float<T>(kt::to_float(xv[i].v[k]) + kt::to_float(rv.v[k]));
        *reinterpret_cast<kt::Vec<T, VEC>*>(h + (xr - x) + c) = xv[i];
      }
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float f = kt::to_float(xv[i].v[k]);
        sum_sq += f * f;
      }
    }
  }
  const float mean_sq = kt::row_reduce<THREADS, ROW_THREADS>(sum_sq, warp_sums, kt::SumOp{}) / static_cast<float>(dim);
  const float s = rsqrtf(mean_sq + eps);
  if (!active) return;
  if (t == 0) rstd[row] = s;
  T* yr = y + row * dim;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int c = (i * ROW_THREADS + t) * VEC;
    if (c < dim) {
      const kt::Vec<float, VEC> wv = *reinterpret_cast<const kt::Vec<float, VEC>*>(w + c);
      kt::Vec<T, VEC> out;
#pragma unroll
      for (int k = 0; k < VEC; ++k) out.v[k] = kt::from_float<T>(kt::to_float(xv[i].v[k]) * s * wv.v[k]);
      *reinterpret_cast<kt::Vec<T, VEC>*>(yr + c) = out;
    }
  }
}

/// Grid: ceil(rows / (THREADS / ROW_THREADS)) blocks; block b normalises rows
/// b * THREADS / ROW_THREADS, ... (the last block may hold fewer rows).
template <int THREADS,      // threads per block: more rows per block vs more blocks in flight
          int ROW_THREADS,  // threads per row: few keep reductions in shuffles, many cut registers per thread
          int VEC,          // elements per access: wider loads, fewer instructions; dim % VEC == 0
          int ITEMS,        // vectors per thread, ceil(dim / (ROW_THREADS * VEC)): set by the shape
          class T>
__global__ void __launch_bounds__(THREADS)
    rmsnorm_fwd(const T* x,      // (rows, dim)
                const float* w,  // (dim,)
                T* y,            // (rows, dim)
                float* rstd,     // (rows,)
                long long rows, int dim, float eps) {
  kt::wait_previous_kernel();
  forward_rows<THREADS, ROW_THREADS, VEC, ITEMS, false, T>(x, nullptr, w, nullptr, y, rstd, rows, dim, eps);
}

/// h = x + r (rounded to T), then y = h * rstd * w as rmsnorm_fwd: the
/// residual add before a block's norm, in one pass. h may be x or r (in
/// place on the residual stream): each element is read, then written, by
/// one thread. Grid: as rmsnorm_fwd.
template <int THREADS, int ROW_THREADS, int VEC, int ITEMS, class T>
__global__ void __launch_bounds__(THREADS)
    residual_rmsnorm_fwd(const T* x,      // (rows, dim) the residual stream
                         const T* r,      // (rows, dim) the branch output added to it
                         const float* w,  // (dim,)
                         T* h,            // (rows, dim) x + r, kept for the backward; may be x or r
                         T* y,            // (rows, dim)
                         float* rstd,     // (rows,)
                         long long rows, int dim, float eps) {
  kt::wait_previous_kernel();
  forward_rows<THREADS, ROW_THREADS, VEC, ITEMS, true, T>(x, r, w, h, y, rstd, rows, dim, eps);
}

/// Both backward kernels: with RESIDUAL, dstream is added to dx. A row's
/// rstd is loaded with its x and dy, so it is in flight with them rather
/// than after the reduction. With PREFETCH 1 a thread loads its row of the
/// block's next group (x, dy, rstd and dstream) before this group's
/// reduction, so those loads are in flight across its barrier and stores,
/// where a group's loads would otherwise wait for the previous group's end
/// (and dstream's for the reduction). With PREFETCH 2 (RESIDUAL) dstream is
/// loaded with this group's x and dy, in flight across the reduction, for
/// a third row held in registers rather than twice each.
template <int THREADS, int ROW_THREADS, int VEC, int ITEMS, int PREFETCH, bool RESIDUAL, class T>
KT_DEVICE void backward_rows(const T* x, const float* w, const float* rstd, const T* dy, const T* dstream, T* dx,
                             float* dw_partial, long long rows, int dim) {
  check_layout<THREADS, ROW_THREADS, VEC, ITEMS, T>();
  static_assert(PREFETCH == 0 || PREFETCH == 1 || (PREFETCH == 2 && RESIDUAL), "prefetch 0, 1, or 2 with dstream");
  constexpr bool AHEAD = PREFETCH == 1;                     // the next group's rows in flight
  constexpr bool STREAM_EARLY = RESIDUAL && PREFETCH == 2;  // dstream in flight with x and dy
  constexpr int ROWS = THREADS / ROW_THREADS;
  constexpr int SPAN = ROW_THREADS * VEC;  // columns of one item
  static_assert(THREADS * VEC * 4 <= 32 * 1024, "the dw exchange buffer fits in static shared memory");
  __shared__ float warp_sums[THREADS / 32];
  __shared__ __align__(16) float exchange[ROWS > 1 ? ROWS * SPAN : 1];  // (ROWS, SPAN): one item of every slot
  const int t = static_cast<int>(threadIdx.x) % ROW_THREADS;
  const int slot = static_cast<int>(threadIdx.x) / ROW_THREADS;

  float dw_acc[ITEMS][VEC];
#pragma unroll
  for (int i = 0; i < ITEMS; ++i)
#pragma unroll
    for (int k = 0; k < VEC; ++k) dw_acc[i][k] = 0.0f;

  const long long groups = (rows + ROWS - 1) / ROWS;
  // PREFETCH 1: this thread's row of the block's next group, x, dy, rstd and (RESIDUAL) dstream.
  struct Ahead {
    kt::Vec<T, VEC> x[ITEMS], dy[ITEMS], stream[RESIDUAL ? ITEMS : 1];
    float rstd;
  };
  const auto load_ahead = [&](Ahead& ahead, long long group) {
    const long long row = group * ROWS + slot;
    if (group >= groups || row >= rows) return;
    ahead.rstd = rstd[row];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int c = (i * ROW_THREADS + t) * VEC;
      if (c < dim) {
        ahead.x[i] = *reinterpret_cast<const kt::Vec<T, VEC>*>(x + row * dim + c);
        ahead.dy[i] = *reinterpret_cast<const kt::Vec<T, VEC>*>(dy + row * dim + c);
        if constexpr (RESIDUAL) ahead.stream[i] = *reinterpret_cast<const kt::Vec<T, VEC>*>(dstream + row * dim + c);
      }
    }
  };
  Ahead next;
  if constexpr (AHEAD) load_ahead(next, blockIdx.x);
  for (long long group = blockIdx.x; group < groups; group += gridDim.x) {  // uniform over the block
    const long long row = group * ROWS + slot;
    const bool active = row < rows;
    const long long offset = (active ? row : 0) * dim;
    kt::Vec<T, VEC> xv[ITEMS], dyv[ITEMS], svs[(AHEAD && RESIDUAL) || STREAM_EARLY ? ITEMS : 1];
    float s = 0.0f;
    if constexpr (AHEAD) {
      s = next.rstd;
#pragma unroll
      for (int i = 0; i < ITEMS; ++i) {
        xv[i] = next.x[i];
        dyv[i] = next.dy[i];
        if constexpr (RESIDUAL) svs[i] = next.stream[i];
      }
      load_ahead(next, group + gridDim.x);
    } else if (active) {
      s = rstd[row];
    }
    float dot = 0.0f;  // this thread's part of sum(w * dy * x)
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int c = (i * ROW_THREADS + t) * VEC;
      if (active && c < dim) {
        if constexpr (!AHEAD) {
          xv[i] = *reinterpret_cast<const kt::Vec<T, VEC>*>(x + offset + c);
          dyv[i] = *reinterpret_cast<const kt::Vec<T, VEC>*>(dy + offset + c);
          if constexpr (STREAM_EARLY) svs[i] = *reinterpret_cast<const kt::Vec<T, VEC>*>(dstream + offset + c);
        }
        const kt::Vec<float, VEC> wv = *reinterpret_cast<const kt::Vec<float, VEC>*>(w + c);
#pragma unroll
        for (int k = 0; k < VEC; ++k) dot += wv.v[k] * kt::to_float(dyv[i].v[k]) * kt::to_float(xv[i].v[k]);
      }
    }
    dot = kt::row_reduce<THREADS, ROW_THREADS>(dot, warp_sums, kt::SumOp{});
    if (!active) continue;  // spare slots still join the next group's row_reduce
    const float k_row = s * s * dot / static_cast<float>(dim);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int c = (i * ROW_THREADS + t) * VEC;
      if (c < dim) {
        const kt::Vec<float, VEC> wv = *reinterpret_cast<const kt::Vec<float, VEC>*>(w + c);
        kt::Vec<T, VEC> out, sv;
        if constexpr (RESIDUAL)
          sv = AHEAD || STREAM_EARLY ? svs[i] : *reinterpret_cast<const kt::Vec<T, VEC>*>(dstream + offset + c);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const float xf = kt::to_float(xv[i].v[k]), dyf = kt::to_float(dyv[i].v[k]);
          const float g = s * (wv.v[k] * dyf - xf * k_row);
          out.v[k] = kt::from_float<T>(RESIDUAL ? kt::to_float(sv.v[k]) + g : g);
          dw_acc[i][k] += dyf * xf * s;
        }
        *reinterpret_cast<kt::Vec<T, VEC>*>(dx + offset + c) = out;
      }
    }
  }

  // The block's partial: per item, every slot parks its VEC sums, then each
  // thread adds up columns over the slots in slot order.
  float* partial = dw_partial + static_cast<long long>(blockIdx.x) * dim;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    kt::Vec<float, VEC> acc;
#pragma unroll
    for (int k = 0; k < VEC; ++k) acc.v[k] = dw_acc[i][k];
    if constexpr (ROWS == 1) {
      const int c = (i * ROW_THREADS + t) * VEC;
      if (c < dim) *reinterpret_cast<kt::Vec<float, VEC>*>(partial + c) = acc;
    } else {
      *reinterpret_cast<kt::Vec<float, VEC>*>(exchange + slot * SPAN + t * VEC) = acc;
      __syncthreads();
      for (int j = static_cast<int>(threadIdx.x); j < SPAN; j += THREADS) {
        float sum = 0.0f;
        for (int r = 0; r < ROWS; ++r) sum += exchange[r * SPAN + j];
        if (i * SPAN + j < dim) partial[i * SPAN + j] = sum;
      }
      __syncthreads();  // the next item overwrites exchange
    }
  }
}

/// With g = w * dy:  dx = rstd * (g - x * rstd^2 * mean(g * x)), and block b's
/// partial dw[c] = sum over its rows of dy * x * rstd, written to
/// dw_partial[b * dim + c].
/// Grid: any number of blocks up to ceil(rows / (THREADS / ROW_THREADS));
/// block b takes the row groups b, b + gridDim.x, ... (THREADS / ROW_THREADS
/// rows each), so the split of rows, and the sums, depend only on the grid.
template <int THREADS, int ROW_THREADS, int VEC, int ITEMS,
          int PREFETCH,  // 1: the next row group's loads issued before this group's reduction (0: not)
          class T>
__global__ void __launch_bounds__(THREADS)
    rmsnorm_bwd(const T* x,           // (rows, dim)
                const float* w,       // (dim,)
                const float* rstd,    // (rows,) from rmsnorm_fwd
                const T* dy,          // (rows, dim)
                T* dx,                // (rows, dim)
                float* dw_partial,    // (gridDim.x, dim)
                long long rows, int dim) {
  kt::wait_previous_kernel();
  backward_rows<THREADS, ROW_THREADS, VEC, ITEMS, PREFETCH, false, T>(x, w, rstd, dy, nullptr, dx, dw_partial, rows,
                                                                     dim);
}

/// Backward of residual_rmsnorm_fwd: dh = dstream + the norm's input
/// gradient (rmsnorm_bwd's dx), the gradient of h = x + r and so of both x
/// and r; dw_partial as rmsnorm_bwd. dh may be dstream (the residual
/// stream's gradient updated in place): each element is read, then written,
/// by one thread. Grid: as rmsnorm_bwd.
template <int THREADS, int ROW_THREADS, int VEC, int ITEMS,
          int PREFETCH,  // 1: the next row group's loads ahead; 2: dstream's with this group's x and dy; 0: neither
          class T>
__global__ void __launch_bounds__(THREADS)
    residual_rmsnorm_bwd(const T* h,         // (rows, dim) from residual_rmsnorm_fwd
                         const float* w,     // (dim,)
                         const float* rstd,  // (rows,) from residual_rmsnorm_fwd
                         const T* dy,        // (rows, dim)
                         const T* dstream,   // (rows, dim) the gradient reaching h through the residual path
                         T* dh,              // (rows, dim) may be dstream
                         float* dw_partial,  // (gridDim.x, dim)
                         long long rows, int dim) {
  kt::wait_previous_kernel();
  backward_rows<THREADS, ROW_THREADS, VEC, ITEMS, PREFETCH, true, T>(h, w, rstd, dy, dstream, dh, dw_partial, rows,
                                                                    dim);
}

/// dw[c] = sum over p < parts of dw_partial[p * dim + c], in order of p within
/// each warp's share, then in warp order.
/// Grid: ceil(dim / 32) blocks; a block owns 32 columns (one per lane, so
/// each partial row is read as 128-byte lines) and its warps split the partials.
template <int THREADS>  // threads per block: more warps share the partials of 32 columns
__global__ void __launch_bounds__(THREADS)
    rmsnorm_dw_reduce(const float* dw_partial,  // (parts, dim)
                      float* dw,                // (dim,)
                      int parts, int dim) {
  kt::wait_previous_kernel();
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "a block is whole warps, at most 1024 threads");
  constexpr int WARPS = THREADS / 32;
  __shared__ float warp_sums[WARPS][32];
  const int lane = static_cast<int>(kt::lane_id());
  const int warp = static_cast<int>(kt::warp_id());
  const int c = static_cast<int>(blockIdx.x) * 32 + lane;
  float sum = 0.0f;
  if (c < dim)
#pragma unroll 8  // eight loads in flight; the adds keep their order
    for (int p = warp; p < parts; p += WARPS) sum += dw_partial[static_cast<long long>(p) * dim + c];
  warp_sums[warp][lane] = sum;
  __syncthreads();
  if (warp == 0 && c < dim) {
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < WARPS; ++i) total += warp_sums[i][lane];
    dw[c] = total;
  }
}

}  // namespace rmsnorm
