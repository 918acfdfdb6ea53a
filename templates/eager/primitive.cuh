// Primitive kernels: one plain op per launch, as PyTorch eager issues them
// (reference: templates/eager/reference.hpp). The eager decompositions
// (templates/eager/eager.hpp) chain them into every fused family's op.
// Tensors are of type T (float or __nv_bfloat16); math is fp32. One config:
// THREADS threads per block; untuned. The elementwise kernels (unary,
// binary, fill, causal_mask, gather_rows) take PyTorch's elementwise shape
// (common/elementwise.cuh): N = kt::elementwise_width<T>() consecutive
// elements per thread (4 fp32, 8 bf16), one 16-byte access per operand where
// aligned. The others say their grids.
//   unary        y = op(x, alpha)                              (n,)
//   binary       y = op(a, b) with b broadcast over rows and/or columns
//   row_reduce   y[r] = op over the columns of row r           (rows,)
//   col_sum      y[c] = sum over the rows of column c          (cols,)
//   gather       y[r] = x[r, idx[r]]                           (rows,)
//   scatter_add  y[r, idx[r]] += alpha                         in place
//   causal_mask  y[r, c] = alpha where c > r % cols            in place
//   fill         y = alpha                                     (n,)
//   gather_rows  y[r, :] = x[idx[r], :]                        (index_select)
//   index_add    y[idx[r], :] += x[r, :]                       (index_add_, atomic)
//   strided      y = op(a, b) (or a copy of a) over strided 4-d views of
//                each operand: PyTorch's TensorIterator over views such as
//                x[..., 0::2] or a table broadcast over some dims
#pragma once
#include "common/elementwise.cuh"

namespace prim {

// Ops, as template arguments; the host side names them (templates/eager/primitive.hpp).
enum UnaryOp { kNeg, kExp, kLog, kRsqrt, kSqrt, kSilu, kSigmoid, kSquare, kScale, kAddScalar };
enum BinaryOp { kAdd, kSub, kMul, kDiv, kSiluBackward, kRsqrtBackward };
enum ReduceOp { kSum, kMax, kMean };

template <int OP>
KT_DEVICE float unary_op(float x, float alpha) {
  if constexpr (OP == kNeg) return -x;
  if constexpr (OP == kExp) return expf(x);
  if constexpr (OP == kLog) return logf(x);
  if constexpr (OP == kRsqrt) return rsqrtf(x);
  if constexpr (OP == kSqrt) return sqrtf(x);
  if constexpr (OP == kSilu) return x / (1.0f + expf(-x));
  if constexpr (OP == kSigmoid) return 1.0f / (1.0f + expf(-x));
  if constexpr (OP == kSquare) return x * x;
  if constexpr (OP == kScale) return alpha * x;
  if constexpr (OP == kAddScalar) return x + alpha;
  return 0.0f;  // not reached: every op returned above
}

/// kSiluBackward: a = the gradient of silu(b), b = its input (PyTorch's
/// silu_backward); kRsqrtBackward: a = the gradient of r = rsqrt(.), b = r.
template <int OP>
KT_DEVICE float binary_op(float a, float b) {
  if constexpr (OP == kAdd) return a + b;
  if constexpr (OP == kSub) return a - b;
  if constexpr (OP == kMul) return a * b;
  if constexpr (OP == kDiv) return a / b;
  if constexpr (OP == kSiluBackward) {
    const float s = 1.0f / (1.0f + expf(-b));
    return a * s * (1.0f + b * (1.0f - s));
  }
  if constexpr (OP == kRsqrtBackward) return -0.5f * a * b * b * b;
  return 0.0f;  // not reached: every op returned above
}

/// Grid: ceil(n / (THREADS * N)).
template <int THREADS, int OP, class T>
__global__ void __launch_bounds__(THREADS) unary(const T* x, T* y, long long n, float alpha) {
  kt::wait_previous_kernel();
  kt::map<THREADS>(n, y, [alpha](float v) { return unary_op<OP>(v, alpha); }, x);
}

/// y (rows, cols) = op(a (rows, cols), b[r * b_row_stride + c * b_col_stride]):
/// strides (cols, 1) for a full b, (0, 1) for a row vector (cols,) repeated
/// over the rows, (1, 0) for a column (rows,) repeated across the columns.
/// A full b (strides (cols, 1)) is read as a is; a broadcast one element by
/// element, the thread walking the row and column of its first element.
/// Grid: ceil(rows * cols / (THREADS * N)).
template <int THREADS, int OP, class T>
__global__ void __launch_bounds__(THREADS)
    binary(const T* a, const T* b, T* y, long long rows, long long cols, long long b_row_stride,
           long long b_col_stride) {
  kt::wait_previous_kernel();
  constexpr int N = kt::elementwise_width<T>();
  const long long n = rows * cols;
  if (b_row_stride == cols && b_col_stride == 1) {
    kt::map<THREADS>(n, y, [](float av, float bv) { return binary_op<OP>(av, bv); }, a, b);
    return;
  }
  const kt::ThreadElements e = kt::thread_elements<THREADS, N>(n, kt::aligned16(a) && kt::aligned16(y));
  float av[N], bv[N];
  kt::load_elements(a, e, av);
  long long r = e.first / cols, c = e.first - r * cols;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    bv[k] = e.first + k < n ? kt::to_float(b[r * b_row_stride + c * b_col_stride]) : 0.0f;
    if (++c == cols) {
      c = 0;
      ++r;
    }
  }
#pragma unroll
  for (int k = 0; k < N; ++k) av[k] = binary_op<OP>(av[k], bv[k]);
  kt::store_elements(y, e, av);
}

/// Grid: rows blocks, a block per row (kt::row_reduce over the block); a
/// row whose start is 16-byte aligned and whose columns are a multiple of N
/// is read in vectors of N.
template <int THREADS, int OP, class T>
__global__ void __launch_bounds__(THREADS) row_reduce(const T* x, T* y, long long rows, int cols) {
  kt::wait_previous_kernel();
  constexpr int N = kt::elementwise_width<T>();
  __shared__ float warp_partials[THREADS / 32];
  const T* row = x + static_cast<long long>(blockIdx.x) * cols;
  float v = OP == kMax ? kt::negative_infinity() : 0.0f;
  auto take = [&v](float e) { v = OP == kMax ? kt::max_nan(e, v) : v + e; };
  if (cols % N == 0 && kt::aligned16(row)) {
    for (int c = static_cast<int>(threadIdx.x) * N; c < cols; c += THREADS * N) {
      const kt::Vec<T, N> w = *reinterpret_cast<const kt::Vec<T, N>*>(row + c);
#pragma unroll
      for (int k = 0; k < N; ++k) take(kt::to_float(w.v[k]));
    }
  } else {
    for (int c = static_cast<int>(threadIdx.x); c < cols; c += THREADS) take(kt::to_float(row[c]));
  }
  if constexpr (OP == kMax)
    v = kt::row_reduce<THREADS, THREADS>(v, warp_partials, kt::MaxOp{});
  else
    v = kt::row_reduce<THREADS, THREADS>(v, warp_partials, kt::SumOp{});
  if (threadIdx.x == 0) y[blockIdx.x] = kt::from_float<T>(OP == kMean ? v / static_cast<float>(cols) : v);
}

/// Grid: ceil(cols / 32) blocks; block b sums the 32 columns from 32 b, lane
/// l column 32 b + l, warp w the rows w, w + WARPS, ... in order, and the
/// block adds the warps' sums in warp order: the same sums whatever the
/// schedule.
template <int THREADS, class T>
__global__ void __launch_bounds__(THREADS) col_sum(const T* x, T* y, long long rows, int cols) {
  kt::wait_previous_kernel();
  constexpr int WARPS = THREADS / 32;
  __shared__ float warp_sums[WARPS][32];
  const int lane = static_cast<int>(kt::lane_id()), warp = static_cast<int>(kt::warp_id());
  const long long c = static_cast<long long>(blockIdx.x) * 32 + lane;
  float sum = 0.0f;
  if (c < cols)
    for (long long r = warp; r < rows; r += WARPS) sum += kt::to_float(x[r * cols + c]);
  warp_sums[warp][lane] = sum;
  __syncthreads();
  if (warp != 0 || c >= cols) return;
  for (int w = 1; w < WARPS; ++w) sum += warp_sums[w][lane];
  y[c] = kt::from_float<T>(sum);
}

/// y[r] = x[r, idx[r]]; NaN for an index outside [0, cols). Grid: ceil(rows / THREADS).
template <int THREADS, class T>
__global__ void __launch_bounds__(THREADS) gather(const T* x, const int* idx, T* y, long long rows, int cols) {
  kt::wait_previous_kernel();
  const long long r = kt::global_thread_x();
  if (r >= rows) return;
  const int c = idx[r];
  y[r] = c >= 0 && c < cols ? x[r * cols + c] : kt::from_float<T>(__uint_as_float(0x7fc00000u));
}

/// y[r, idx[r]] += alpha; rows whose index is outside [0, cols) become NaN.
/// Grid: ceil(rows / THREADS).
template <int THREADS, class T>
__global__ void __launch_bounds__(THREADS) scatter_add(T* y, const int* idx, long long rows, int cols, float alpha) {
  kt::wait_previous_kernel();
  const long long r = kt::global_thread_x();
  if (r >= rows) return;
  const int c = idx[r];
  if (c >= 0 && c < cols)
    y[r * cols + c] = kt::from_float<T>(kt::to_float(y[r * cols + c]) + alpha);
  else
    for (int j = 0; j < cols; ++j) y[r * cols + j] = kt::from_float<T>(__uint_as_float(0x7fc00000u));
}

/// y (rows, cols), stacked (cols, cols) blocks: y[r, c] = alpha above each
/// block's diagonal (c > r % cols), the rest left as it is; in place
/// (masked_fill with the causal mask: alpha -inf on the scores, 0 on their
/// gradient). A thread whose elements are all below the diagonals writes
/// nothing. Grid: ceil(rows * cols / (THREADS * N)).
template <int THREADS, class T>
__global__ void __launch_bounds__(THREADS) causal_mask(T* y, long long rows, int cols, float alpha) {
  kt::wait_previous_kernel();
  constexpr int N = kt::elementwise_width<T>();
  const long long n = rows * cols;
  const kt::ThreadElements e = kt::thread_elements<THREADS, N>(n, kt::aligned16(y));
  if (e.first >= n) return;
  const long long r = e.first / cols;
  int c = static_cast<int>(e.first - r * cols), diagonal = static_cast<int>(r % cols);
  bool masked[N], any = false;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    masked[k] = c > diagonal;
    any = any || masked[k];
    if (++c == cols) {
      c = 0;
      diagonal = diagonal + 1 == cols ? 0 : diagonal + 1;
    }
  }
  if (!any) return;
  float v[N];
  kt::load_elements(y, e, v);
#pragma unroll
  for (int k = 0; k < N; ++k) v[k] = masked[k] ? alpha : v[k];
  kt::store_elements(y, e, v);
}

/// y = alpha. Grid: ceil(n / (THREADS * N)).
template <int THREADS, class T>
__global__ void __launch_bounds__(THREADS) fill(T* y, long long n, float alpha) {
  kt::wait_previous_kernel();
  kt::map<THREADS>(n, y, [alpha] { return alpha; });
}

/// y (rows, cols) = the rows idx (rows,) of x (table_rows, cols); NaN rows
/// for an index outside [0, table_rows). In the elementwise shape over y:
/// with rows of a multiple of N columns and x, y aligned, a thread's N
/// elements lie in one row and move as one vector; else element by element,
/// the thread walking the row and column of its first. Grid: ceil(rows *
/// cols / (THREADS * N)).
template <int THREADS, class T>
__global__ void __launch_bounds__(THREADS)
    gather_rows(const T* x, const int* idx, T* y, long long rows, long long cols, long long table_rows) {
  kt::wait_previous_kernel();
  constexpr int N = kt::elementwise_width<T>();
  const long long n = rows * cols;
  const kt::ThreadElements e =
      kt::thread_elements<THREADS, N>(n, cols % N == 0 && kt::aligned16(x) && kt::aligned16(y));
  if (e.first >= n) return;
  long long r = e.first / cols, c = e.first - r * cols;
  const T nan = kt::from_float<T>(__uint_as_float(0x7fc00000u));
  if (e.whole) {
    const int id = idx[r];
    kt::Vec<T, N> v;
    if (id >= 0 && id < table_rows) {
      v = *reinterpret_cast<const kt::Vec<T, N>*>(x + id * cols + c);
    } else {
#pragma unroll
      for (int k = 0; k < N; ++k) v.v[k] = nan;
    }
    *reinterpret_cast<kt::Vec<T, N>*>(y + e.first) = v;
    return;
  }
  for (int k = 0; k < N && e.first + k < n; ++k) {
    const int id = idx[r];
    y[e.first + k] = id >= 0 && id < table_rows ? x[id * cols + c] : nan;
    if (++c == cols) {
      c = 0;
      ++r;
    }
  }
}

/// y (table_rows, cols) row idx[r] += x (rows, cols) row r, fp32 atomics (the
/// order of a row's sum, and so its last bits, vary); rows whose index is
/// outside [0, table_rows) are left out. Grid: ceil(rows * cols / THREADS).
template <int THREADS>
__global__ void __launch_bounds__(THREADS)
    index_add(const float* x, const int* idx, float* y, long long rows, long long cols, long long table_rows) {
  kt::wait_previous_kernel();
  const long long i = kt::global_thread_x();
  if (i >= rows * cols) return;
  const long long r = i / cols, c = i % cols;
  const int id = idx[r];
  if (id >= 0 && id < table_rows) atomicAdd(y + id * cols + c, x[i]);
}

/// A 4-d index space and each operand's view of it: element (i0, i1, i2, i3)
/// of an operand sits at sum(i_k * stride_k) from its pointer (stride 0
/// broadcasts). y's view must not repeat an element (the host checks it).
struct Views {
  long long size[4];
  long long a[4], b[4], y[4];
};

KT_DEVICE long long view_offset(const long long (&index)[4], const long long (&stride)[4]) {
  return index[0] * stride[0] + index[1] * stride[1] + index[2] * stride[2] + index[3] * stride[3];
}

/// The thread's index in the 4-d space, or false past its end; by 32-bit
/// divisions where the space has fewer than 2^32 elements, as PyTorch's
/// index arithmetic.
KT_DEVICE bool view_index(const Views& v, long long (&index)[4]) {
  const long long elements = v.size[0] * v.size[1] * v.size[2] * v.size[3];
  long long i = kt::global_thread_x();
  if (i >= elements) return false;
  if (elements <= 0xffffffffLL) {
    auto j = static_cast<unsigned>(i);
    for (int k = 3; k >= 0; --k) {
      const auto size = static_cast<unsigned>(v.size[k]);
      index[k] = j % size;
      j /= size;
    }
    return true;
  }
  for (int k = 3; k >= 0; --k) {
    index[k] = i % v.size[k];
    i /= v.size[k];
  }
  return true;
}

/// y = op(a, b) over the views (BinaryOp). Grid: ceil(elements / THREADS).
template <int THREADS, int OP, class T>
__global__ void __launch_bounds__(THREADS) strided_binary(const T* a, const T* b, T* y, Views v) {
  kt::wait_previous_kernel();
  long long index[4];
  if (!view_index(v, index)) return;
  y[view_offset(index, v.y)] = kt::from_float<T>(
      binary_op<OP>(kt::to_float(a[view_offset(index, v.a)]), kt::to_float(b[view_offset(index, v.b)])));
}

/// y = a over the views: a strided copy (contiguous(), stack, cat). Grid: ceil(elements / THREADS).
template <int THREADS, class T>
__global__ void __launch_bounds__(THREADS) strided_copy(const T* a, T* y, Views v) {
  kt::wait_previous_kernel();
  long long index[4];
  if (!view_index(v, index)) return;
  y[view_offset(index, v.y)] = a[view_offset(index, v.a)];
}

}  // namespace prim
