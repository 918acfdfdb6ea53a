// CPU reference of scaled dot-product multi-head attention (optionally
// causal): the single implementation of its math, used by the cpu backend and
// as the reference the attention kernels are checked against.
//   P = softmax(scale * Q K^T, masked j > i when causal),  O = P V
// Two forms of the forward:
//   attention_forward            materialises P (the cpu backend keeps it for
//                                its backward); scale = 1 / sqrt(head_dim)
//   attention_forward_streaming  one query row at a time with an online
//                                softmax, never more than a row of state: O and
//                                the row log-sum-exp, any scale, any strides
// and of the backward:
//   attention_backward           from the materialised P
//   attention_backward_streaming from O, the log-sum-exp and dO, one query row
//                                at a time (P recomputed), grouped-query heads
//                                summed into their K/V head's dK and dV
// The streaming forms can skip query rows (a row mask), so a large problem is
// checked on a sample of its rows.
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
  /// Heads of K and V: query head h reads K/V head h / (heads / kv_heads)
  /// (grouped-query attention; heads % kv_heads == 0). The streaming forward
  /// reads it; the materialising forward and backward take kv_heads == heads.
  std::int64_t kv_heads = heads;
};

/// Element strides of a tensor indexed (batch, seq, head, d) whose head_dim
/// is contiguous: (batch, seq, heads, head_dim) and (batch, heads, seq,
/// head_dim) are both such tensors, as are views into a fused QKV buffer.
struct TensorStrides {
  std::int64_t batch = 0;
  std::int64_t head = 0;
  std::int64_t seq = 0;
  friend bool operator==(const TensorStrides&, const TensorStrides&) = default;
};
/// Strides of a contiguous (batch, seq, heads, head_dim) tensor (the model's layout).
TensorStrides bshd_strides(const AttentionShape& s);
/// Strides of a contiguous (batch, heads, seq, head_dim) tensor.
TensorStrides bhsd_strides(const AttentionShape& s);

/// Scratch elements per thread that forward and backward need.
std::int64_t scratch_elements(const AttentionShape& s);

/// Forward for the (batch, head) pairs bh in [bh_begin, bh_end), bh = b*heads + h.
/// q, k, v, out: (batch, seq, heads, head_dim); probs: (batch, heads, seq, seq),
/// kept for the backward (zero above the diagonal when causal).
/// scratch: scratch_elements(s) values owned by the calling thread.
template <class T>
void attention_forward(const T* q, const T* k, const T* v, T* probs, T* out, T* scratch, const AttentionShape& s,
                       std::int64_t bh_begin, std::int64_t bh_end);

/// Streaming forward for the (batch, head) pairs bh in [bh_begin, bh_end),
/// bh = b*heads + h, one query row at a time (online softmax, no (seq, seq)
/// matrix): out_i = sum_j softmax_j(scale * q_i.k_j) v_j over j <= i when
/// causal, all j otherwise, and lse[(b*heads + h)*seq + i] = log(sum_j
/// exp(scale * q_i.k_j)) (natural log, of the scaled scores); k_j and v_j
/// are rows of K/V head h / (heads / kv_heads). q, k, v and out are
/// addressed through their strides; lse is (batch, heads, seq).
/// `rows`, when given, is a (batch, heads, seq) mask: rows whose byte is 0
/// are skipped (their out and lse left as they are).
template <class T>
void attention_forward_streaming(const T* q, const T* k, const T* v, T* out, T* lse, const AttentionShape& s,
                                 const TensorStrides& q_strides, const TensorStrides& k_strides,
                                 const TensorStrides& v_strides, const TensorStrides& out_strides, T scale,
                                 std::int64_t bh_begin, std::int64_t bh_end, const std::uint8_t* rows = nullptr);

/// Streaming backward for the (batch, K/V head) pairs bkv in [bkv_begin,
/// bkv_end), bkv = b*kv_heads + kvh, one query row at a time, from the
/// forward's out and lse (as attention_forward_streaming writes them) and
/// dout: for each query head h of the pair's group and row i (keys j <= i
/// when causal, all otherwise)
///   P_ij = exp(scale * q_i.k_j - lse_i),  D_i = dout_i . out_i,
///   dS_ij = P_ij (dout_i . v_j - D_i),
///   dq_i = scale sum_j dS_ij k_j,  dk_j += scale dS_ij q_i,  dv_j += P_ij dout_i.
/// dk and dv of the pair's K/V head are overwritten (sums over its query
/// heads); dq of its query heads too. q, out, dout and dq are addressed
/// through q_strides; k, v, dk and dv through kv_strides; lse is (batch,
/// heads, seq). `rows`, when given, is a (batch, heads, seq) mask: a row
/// whose byte is 0 is taken to have dout_i = 0 (dq_i = 0, nothing added to
/// dk, dv), so only the checked rows cost time.
template <class T>
void attention_backward_streaming(const T* q, const T* k, const T* v, const T* out, const T* lse, const T* dout,
                                  T* dq, T* dk, T* dv, const AttentionShape& s, const TensorStrides& q_strides,
                                  const TensorStrides& kv_strides, T scale, std::int64_t bkv_begin,
                                  std::int64_t bkv_end, const std::uint8_t* rows = nullptr);

/// Backward for the pairs in [bh_begin, bh_end): writes dq, dk, dv (shapes of
/// q, k, v) for those pairs from dout and the forward's probs.
template <class T>
void attention_backward(const T* q, const T* k, const T* v, const T* probs, const T* dout, T* dq, T* dk, T* dv,
                        T* scratch, const AttentionShape& s, std::int64_t bh_begin, std::int64_t bh_end);

}  // namespace ktune::templates::attention
