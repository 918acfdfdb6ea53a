// CPU reference of the row-wise softmax, forward and backward: the single
// implementation of its math, used by attention's reference, the cpu backend
// and as the kernel reference (templates/softmax/softmax.hpp).
//
// The scaled and masked form is what eager attention runs between its two
// GEMMs: y = softmax(scale * x) over the columns a row sees. With `causal`,
// the rows are (seq, seq) score blocks stacked (rows = batch * heads * seq,
// cols = seq): row r is query i = r % cols and sees keys j <= i; the masked
// entries of y (and of dx) are 0.
#pragma once
#include <cstdint>

namespace ktune::templates::softmax {

/// y = softmax(x) over each of `rows` rows of `cols` elements (max-subtracted).
/// x, y (rows, cols); y may alias x.
template <class T>
void softmax_forward(const T* x, T* y, std::int64_t rows, std::int64_t cols);

/// y = softmax(scale * x) over the columns each row sees (all of them, or
/// j <= r % cols with `causal`), 0 elsewhere. x, y (rows, cols); y may alias x.
template <class T>
void softmax_forward(const T* x, T* y, std::int64_t rows, std::int64_t cols, T scale, bool causal);

/// dx = y * (dy - sum(dy * y)) per row, from the forward's output y.
/// y, dy, dx (rows, cols); dx may alias dy.
template <class T>
void softmax_backward(const T* y, const T* dy, T* dx, std::int64_t rows, std::int64_t cols);

/// The gradient with respect to x of the scaled, masked forward:
/// dx = scale * y * (dy - sum(dy * y)) over the columns a row sees, 0
/// elsewhere (dy there is not read). y, dy, dx (rows, cols); dx may alias dy.
template <class T>
void softmax_backward(const T* y, const T* dy, T* dx, std::int64_t rows, std::int64_t cols, T scale, bool causal);

}  // namespace ktune::templates::softmax
