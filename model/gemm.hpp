// The linear layers' GEMMs through OpenBLAS (the only op of the cpu backend
// without a kernel family: cuBLAS/cuBLASLt play that part on the GPU).
// Weights are stored (out, in) like torch.nn.Linear; all matrices row-major.
#pragma once
#include <cstdint>

namespace ktune::model {

/// y (n, out) = x (n, in) W^T + beta * y, W (out, in).
template <class T>
void linear_forward(const T* x, const T* w, T* y, std::int64_t n, std::int64_t in, std::int64_t out, T beta = T(0));

/// dx (n, in) = dy (n, out) W + beta * dx.
template <class T>
void linear_backward_input(const T* dy, const T* w, T* dx, std::int64_t n, std::int64_t in, std::int64_t out,
                           T beta = T(0));

/// dW (out, in) = dy^T (out, n) x (n, in) + beta * dW.
template <class T>
void linear_backward_weight(const T* dy, const T* x, T* dw, std::int64_t n, std::int64_t in, std::int64_t out,
                            T beta = T(0));

/// Threads OpenBLAS uses for every GEMM of this process.
void set_gemm_threads(unsigned threads);

}  // namespace ktune::model
