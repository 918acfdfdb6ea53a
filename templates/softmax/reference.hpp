// CPU reference of the row-wise softmax, forward and backward: the single
// implementation of its math, used by attention's reference, the cpu backend
// and as the kernel reference.
#pragma once
#include <cstdint>

namespace ktune::templates::softmax {

/// y = softmax(x) over each of `rows` rows of `cols` elements (max-subtracted).
/// x, y (rows, cols); y may alias x.
template <class T>
void softmax_forward(const T* x, T* y, std::int64_t rows, std::int64_t cols);

/// dx = y * (dy - sum(dy * y)) per row, from the forward's output y.
/// y, dy, dx (rows, cols); dx may alias dy.
template <class T>
void softmax_backward(const T* y, const T* dy, T* dx, std::int64_t rows, std::int64_t cols);

}  // namespace ktune::templates::softmax
