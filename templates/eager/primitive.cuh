// Primitive kernels: one plain op per launch, as PyTorch eager issues them
// (reference: templates/eager/reference.hpp). The eager decompositions
// (templates/eager/eager.hpp) chain them into every fused family's op.
// Tensors are of type T (float or __nv_bfloat16); math is fp32. One config:
// THREADS threads per block, one element (or row) per thread; untuned.
//   unary        y = op(x, alpha)                              (n,)
//   binary       y = op(a, b) with b broadcast over rows and/or columns
//   row_reduce   y[r] = op over the columns of row r           (rows,)
//   col_sum      y[c] = sum over the rows of column c          (cols,)
//   gather       y[r] = x[r, idx[r]]                           (rows,)
//   scatter_add  y[r, idx[r]] += alpha                         in place
#pragma once
#include "common/kt.cuh"

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

/// Grid: ceil(n / THREADS).
template <int THREADS, int OP, class T>
__global__ void __launch_bounds__(THREADS) unary(const T* x, T* y, long long n, float alpha) {
  const long long i = kt::global_thread_x();
  if (i < n) y[i] = kt::from_float<T>(unary_op<OP>(kt::to_float(x[i]), alpha));
}

/// y (rows, cols) = op(a (rows, cols), b[r * b_row_stride + c * b_col_stride]):
/// strides (cols, 1) for a full b, (0, 1) for a row vector (cols,) repeated
/// over the rows, (1, 0) for a column (rows,) repeated across the columns.
/// Grid: ceil(rows * cols / THREADS).
template <int THREADS, int OP, class T>
__global__ void __launch_bounds__(THREADS)
    binary(const T* a, const T* b, T* y, long long rows, long long cols, long long b_row_stride,
           long long b_col_stride) {
  const long long i = kt::global_thread_x();
  if (i >= rows * cols) return;
  const long long r = i / cols, c = i % cols;
  y[i] = kt::from_float<T>(binary_op<OP>(kt::to_float(a[i]), kt::to_float(b[r * b_row_stride + c * b_col_stride])));
}

/// Grid: rows blocks, a block per row (kt::row_reduce over the block).
template <int THREADS, int OP, class T>
__global__ void __launch_bounds__(THREADS) row_reduce(const T* x, T* y, long long rows, int cols) {
  __shared__ float warp_partials[THREADS / 32];
  const T* row = x + static_cast<long long>(blockIdx.x) * cols;
  float v = OP == kMax ? kt::negative_infinity() : 0.0f;
  for (int c = static_cast<int>(threadIdx.x); c < cols; c += THREADS) {
    const float e = kt::to_float(row[c]);
    v = OP == kMax ? (e > v ? e : v) : v + e;
  }
  if constexpr (OP == kMax)
    v = kt::row_reduce<THREADS, THREADS>(v, warp_partials, kt::MaxOp{});
  else
    v = kt::row_reduce<THREADS, THREADS>(v, warp_partials, kt::SumOp{});
  if (threadIdx.x == 0) y[blockIdx.x] = kt::from_float<T>(OP == kMean ? v / static_cast<float>(cols) : v);
}

/// Grid: ceil(cols / THREADS); a thread per column adds its rows in order.
template <int THREADS, class T>
__global__ void __launch_bounds__(THREADS) col_sum(const T* x, T* y, long long rows, int cols) {
  const long long c = kt::global_thread_x();
  if (c >= cols) return;
  float sum = 0.0f;
  for (long long r = 0; r < rows; ++r) sum += kt::to_float(x[r * cols + c]);
  y[c] = kt::from_float<T>(sum);
}

/// y[r] = x[r, idx[r]]; NaN for an index outside [0, cols). Grid: ceil(rows / THREADS).
template <int THREADS, class T>
__global__ void __launch_bounds__(THREADS) gather(const T* x, const int* idx, T* y, long long rows, int cols) {
  const long long r = kt::global_thread_x();
  if (r >= rows) return;
  const int c = idx[r];
  y[r] = c >= 0 && c < cols ? x[r * cols + c] : kt::from_float<T>(__uint_as_float(0x7fc00000u));
}

/// y[r, idx[r]] += alpha; rows whose index is outside [0, cols) become NaN.
/// Grid: ceil(rows / THREADS).
template <int THREADS, class T>
__global__ void __launch_bounds__(THREADS) scatter_add(T* y, const int* idx, long long rows, int cols, float alpha) {
  const long long r = kt::global_thread_x();
  if (r >= rows) return;
  const int c = idx[r];
  if (c >= 0 && c < cols)
    y[r * cols + c] = kt::from_float<T>(kt::to_float(y[r * cols + c]) + alpha);
  else
    for (int j = 0; j < cols; ++j) y[r * cols + j] = kt::from_float<T>(__uint_as_float(0x7fc00000u));
}

}  // namespace prim
