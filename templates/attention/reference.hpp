// CPU reference of scaled dot-product multi-head attention (optionally
// causal) that materialises the probability matrix, forward and backward:
// the single implementation of its math, used by the cpu backend and as the
// reference the attention kernels are checked against.
//   P = softmax(Q K^T / sqrt(head_dim), masked j > i when causal),  O = P V
#pragma once
#include <cstdint>

namespace ktune::templates::attention {

/// Sizes of one attention problem.
struct AttentionShape {
  std::int64_t batch = 1;
  std::int64_t seq = 1;
  std::int64_t heads = 1;
  std::int64_t head_dim = 1;
  bool causal = true;
};

/// Scratch elements per thread that forward and backward need.
std::int64_t scratch_elements(const AttentionShape& s);

/// Forward for the (batch, head) pairs bh in [bh_begin, bh_end), bh = b*heads + h.
/// q, k, v, out: (batch, seq, heads, head_dim); probs: (batch, heads, seq, seq),
/// kept for the backward (zero above the diagonal when causal).
/// scratch: scratch_elements(s) values owned by the calling thread.
template <class T>
void attention_forward(const T* q, const T* k, const T* v, T* probs, T* out, T* scratch, const AttentionShape& s,
                       std::int64_t bh_begin, std::int64_t bh_end);

/// Backward for the pairs in [bh_begin, bh_end): writes dq, dk, dv (shapes of
/// q, k, v) for those pairs from dout and the forward's probs.
template <class T>
void attention_backward(const T* q, const T* k, const T* v, const T* probs, const T* dout, T* dq, T* dk, T* dv,
                        T* scratch, const AttentionShape& s, std::int64_t bh_begin, std::int64_t bh_end);

}  // namespace ktune::templates::attention
