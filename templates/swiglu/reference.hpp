// CPU reference of the SwiGLU gate, forward and backward: the single
// implementation of its math, used by the cpu backend and as the kernel
// reference. The feed-forward is W2 (SiLU(W1 x) * W3 x); the two input
// projections and W2 are GEMMs, this is the elementwise part between them:
//   h = silu(a) * b,   silu(a) = a * sigmoid(a),   a = W1 x, b = W3 x
#pragma once
#include <cstdint>

namespace ktune::templates::swiglu {

/// h = silu(a) * b for n elements; a, b, h (n,).
template <class T>
void swiglu_forward(const T* a, const T* b, T* h, std::int64_t n);

/// da = dh * b * silu'(a), db = dh * silu(a), with
/// silu'(a) = sigmoid(a) * (1 + a * (1 - sigmoid(a))). da may alias dh.
template <class T>
void swiglu_backward(const T* a, const T* b, const T* dh, T* da, T* db, std::int64_t n);

}  // namespace ktune::templates::swiglu
