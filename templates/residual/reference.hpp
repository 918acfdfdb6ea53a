// CPU reference of the residual add, forward and backward: the single
// implementation of its math, used by the cpu backend and as the reference of
// the kernels that fuse it (a residual add usually rides in another kernel's
// epilogue).
//   forward:  x += f(x)          (in place on the residual stream)
//   backward: dx += df           (the stream's gradient flows through, and
//                                 the branch's input gradient is added)
#pragma once
#include <cstdint>

namespace ktune::templates::residual {

/// x[i] += y[i] for n elements.
template <class T>
void residual_add(T* x, const T* y, std::int64_t n);

/// Backward of `out = x + f(x)`: the gradient of the stream `dstream` (n,)
/// receives the branch's input gradient `dbranch_input` (n,).
template <class T>
void residual_backward(T* dstream, const T* dbranch_input, std::int64_t n);

}  // namespace ktune::templates::residual
