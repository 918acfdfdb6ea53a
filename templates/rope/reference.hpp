// CPU reference of rotary position embedding (RoPE) on interleaved pairs
// (x[2i], x[2i+1]) of each head, forward and backward: the single
// implementation of its math, used by the cpu backend and as the kernel
// reference. For position p and pair i the angle is p * theta^(-2i/head_dim):
//   y[2i]   = x[2i] cos - x[2i+1] sin
//   y[2i+1] = x[2i] sin + x[2i+1] cos
// The backward is the rotation by the opposite angle.
#pragma once
#include <cstdint>

namespace ktune::templates::rope {

/// Fills cos and sin tables, each (seq, head_dim/2), for positions 0..seq-1.
/// head_dim must be even.
template <class T>
void rope_tables(std::int64_t seq, std::int64_t head_dim, double theta, T* cos_table, T* sin_table);

/// Rotates tokens [token_begin, token_end) of x (tokens, heads, head_dim) into
/// y (same shape; may alias x). Token t sits at position t % seq (tokens are
/// laid out (batch, seq)).
template <class T>
void rope_forward(const T* x, T* y, const T* cos_table, const T* sin_table, std::int64_t seq, std::int64_t heads,
                  std::int64_t head_dim, std::int64_t token_begin, std::int64_t token_end);

/// Gradient of rope_forward: dx from dy (may alias), same arguments.
template <class T>
void rope_backward(const T* dy, T* dx, const T* cos_table, const T* sin_table, std::int64_t seq, std::int64_t heads,
                   std::int64_t head_dim, std::int64_t token_begin, std::int64_t token_end);

}  // namespace ktune::templates::rope
