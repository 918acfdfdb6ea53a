// Attention forward and backward (see reference.hpp). Inner loops are written
// as axpy's over contiguous rows (K and V staged transposed per head) so that
// the compiler vectorises them without reassociating reductions.
#include "templates/attention/reference.hpp"

#include <cmath>
#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "templates/softmax/reference.hpp"

namespace ktune::templates::attention {

std::int64_t scratch_elements(const AttentionShape& s) { return s.head_dim * s.seq + s.seq; }

TensorStrides bshd_strides(const AttentionShape& s) {
  return {.batch = s.seq * s.heads * s.head_dim, .head = s.head_dim, .seq = s.heads * s.head_dim};
}
TensorStrides bhsd_strides(const AttentionShape& s) {
  return {.batch = s.heads * s.seq * s.head_dim, .head = s.seq * s.head_dim, .seq = s.head_dim};
}

namespace {

// Row i of head (b, h) in a (batch, seq, heads, head_dim) tensor.
inline std::int64_t row(const AttentionShape& s, std::int64_t b, std::int64_t h, std::int64_t i) {
  return ((b * s.seq + i) * s.heads + h) * s.head_dim;
}

// dst (head_dim, seq) = src rows of head (b, h), transposed.
template <class T>
void stage_transposed(const T* src, T* dst, const AttentionShape& s, std::int64_t b, std::int64_t h) {
  for (std::int64_t j = 0; j < s.seq; ++j) {
    const T* r = src + row(s, b, h, j);
    for (std::int64_t d = 0; d < s.head_dim; ++d) dst[d * s.seq + j] = r[d];
  }
}

}  // namespace

template <class T>
void attention_forward(const T* q, const T* k, const T* v, T* probs, T* out, T* scratch, const AttentionShape& s,
                       std::int64_t bh_begin, std::int64_t bh_end) {
  const std::int64_t D = s.head_dim, S = s.seq;
  const T scale = T(1) / std::sqrt(static_cast<T>(D));
  T* kt = scratch;  // (head_dim, seq)
  for (std::int64_t bh = bh_begin; bh < bh_end; ++bh) {
    const std::int64_t b = bh / s.heads, h = bh % s.heads;
    stage_transposed(k, kt, s, b, h);
    T* p_head = probs + bh * S * S;  // (seq, seq)
    for (std::int64_t i = 0; i < S; ++i) {
      const std::int64_t n = s.causal ? i + 1 : S;  // keys this query sees
      const T* qi = q + row(s, b, h, i);
      T* pi = p_head + i * S;
      for (std::int64_t j = 0; j < n; ++j) pi[j] = 0;
      for (std::int64_t d = 0; d < D; ++d) {
        const T a = qi[d] * scale;
        const T* kd = kt + d * S;
        for (std::int64_t j = 0; j < n; ++j) pi[j] += a * kd[j];
      }
      softmax::softmax_forward(pi, pi, 1, n);
      for (std::int64_t j = n; j < S; ++j) pi[j] = 0;
      T* oi = out + row(s, b, h, i);
      for (std::int64_t d = 0; d < D; ++d) oi[d] = 0;
      for (std::int64_t j = 0; j < n; ++j) {
        const T p = pi[j];
        const T* vj = v + row(s, b, h, j);
        for (std::int64_t d = 0; d < D; ++d) oi[d] += p * vj[d];
      }
    }
  }
}

template <class T>
void attention_forward_streaming(const T* q, const T* k, const T* v, T* out, T* lse, const AttentionShape& s,
                                 const TensorStrides& q_strides, const TensorStrides& k_strides,
                                 const TensorStrides& v_strides, const TensorStrides& out_strides, T scale,
                                 std::int64_t bh_begin, std::int64_t bh_end, const std::uint8_t* rows) {
  const std::int64_t D = s.head_dim, S = s.seq, group = s.heads / s.kv_heads;
  auto at = [](const TensorStrides& st, std::int64_t b, std::int64_t h, std::int64_t i) {
    return b * st.batch + h * st.head + i * st.seq;
  };
  std::vector<T> acc(static_cast<std::size_t>(D));  // (head_dim,) unnormalised output row
  for (std::int64_t bh = bh_begin; bh < bh_end; ++bh) {
    const std::int64_t b = bh / s.heads, h = bh % s.heads;
    for (std::int64_t i = 0; i < S; ++i) {
      if (rows && !rows[bh * S + i]) continue;
      const std::int64_t n = s.causal ? i + 1 : S;  // keys this query sees
      const T* qi = q + at(q_strides, b, h, i);
      // Running max m of the scaled scores, sum l of exp(score - m), and
      // acc = sum of exp(score - m) v_j; a larger score rescales both.
      T m = -std::numeric_limits<T>::infinity(), l = 0;
      std::fill(acc.begin(), acc.end(), T(0));
      for (std::int64_t j = 0; j < n; ++j) {
        const T* kj = k + at(k_strides, b, h / group, j);
        T dot = 0;
        for (std::int64_t d = 0; d < D; ++d) dot += qi[d] * kj[d];
        const T score = scale * dot;
        if (score > m) {
          const T rescale = std::exp(m - score);  // 0 for the first key
          l *= rescale;
          for (auto& a : acc) a *= rescale;
          m = score;
        }
        const T p = std::exp(score - m);
        l += p;
        const T* vj = v + at(v_strides, b, h / group, j);
        for (std::int64_t d = 0; d < D; ++d) acc[static_cast<std::size_t>(d)] += p * vj[d];
      }
      T* oi = out + at(out_strides, b, h, i);
      for (std::int64_t d = 0; d < D; ++d) oi[d] = acc[static_cast<std::size_t>(d)] / l;
      lse[bh * S + i] = m + std::log(l);
    }
  }
}

template <class T>
void attention_backward(const T* q, const T* k, const T* v, const T* probs, const T* dout, T* dq, T* dk, T* dv,
                        T* scratch, const AttentionShape& s, std::int64_t bh_begin, std::int64_t bh_end) {
  const std::int64_t D = s.head_dim, S = s.seq;
  const T scale = T(1) / std::sqrt(static_cast<T>(D));
  T* vt = scratch;          // (head_dim, seq)
  T* dp = scratch + D * S;  // (seq,) one row of dP, then dS
  for (std::int64_t bh = bh_begin; bh < bh_end; ++bh) {
    const std::int64_t b = bh / s.heads, h = bh % s.heads;
    stage_transposed(v, vt, s, b, h);
    for (std::int64_t j = 0; j < S; ++j) {
      std::memset(dk + row(s, b, h, j), 0, sizeof(T) * D);
      std::memset(dv + row(s, b, h, j), 0, sizeof(T) * D);
    }
    const T* p_head = probs + bh * S * S;
    for (std::int64_t i = 0; i < S; ++i) {
      const std::int64_t n = s.causal ? i + 1 : S;
      const T* pi = p_head + i * S;
      const T* doi = dout + row(s, b, h, i);
      // dP[i, j] = dO_i . v_j
      for (std::int64_t j = 0; j < n; ++j) dp[j] = 0;
      for (std::int64_t d = 0; d < D; ++d) {
        const T a = doi[d];
        const T* vd = vt + d * S;
        for (std::int64_t j = 0; j < n; ++j) dp[j] += a * vd[j];
      }
      // dV_j += P[i, j] dO_i
      for (std::int64_t j = 0; j < n; ++j) {
        const T p = pi[j];
        T* dvj = dv + row(s, b, h, j);
        for (std::int64_t d = 0; d < D; ++d) dvj[d] += p * doi[d];
      }
      // dS = P * (dP - sum(dP * P)), folded with the score scale
      softmax::softmax_backward(pi, dp, dp, 1, n);
      const T* qi = q + row(s, b, h, i);
      T* dqi = dq + row(s, b, h, i);
      for (std::int64_t d = 0; d < D; ++d) dqi[d] = 0;
      for (std::int64_t j = 0; j < n; ++j) {
        const T g = dp[j] * scale;
        const T* kj = k + row(s, b, h, j);
        T* dkj = dk + row(s, b, h, j);
        for (std::int64_t d = 0; d < D; ++d) {
          dqi[d] += g * kj[d];
          dkj[d] += g * qi[d];
        }
      }
    }
  }
}

template <class T>
void attention_backward_streaming(const T* q, const T* k, const T* v, const T* out, const T* lse, const T* dout,
                                  T* dq, T* dk, T* dv, const AttentionShape& s, const TensorStrides& q_strides,
                                  const TensorStrides& kv_strides, T scale, std::int64_t bkv_begin,
                                  std::int64_t bkv_end, const std::uint8_t* rows) {
  const std::int64_t D = s.head_dim, S = s.seq, group = s.heads / s.kv_heads;
  auto at = [](const TensorStrides& st, std::int64_t b, std::int64_t h, std::int64_t i) {
    return b * st.batch + h * st.head + i * st.seq;
  };
  for (std::int64_t bkv = bkv_begin; bkv < bkv_end; ++bkv) {
    const std::int64_t b = bkv / s.kv_heads, kvh = bkv % s.kv_heads;
    for (std::int64_t j = 0; j < S; ++j) {
      std::fill_n(dk + at(kv_strides, b, kvh, j), D, T(0));
      std::fill_n(dv + at(kv_strides, b, kvh, j), D, T(0));
    }
    for (std::int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
      const std::int64_t bh = b * s.heads + h;
      for (std::int64_t i = 0; i < S; ++i) {
        T* dqi = dq + at(q_strides, b, h, i);
        std::fill_n(dqi, D, T(0));
        if (rows && !rows[bh * S + i]) continue;
        const std::int64_t n = s.causal ? i + 1 : S;  // keys this query sees
        const T* qi = q + at(q_strides, b, h, i);
        const T* oi = out + at(q_strides, b, h, i);
        const T* doi = dout + at(q_strides, b, h, i);
        const T l = lse[bh * S + i];
        T delta = 0;  // D_i
        for (std::int64_t d = 0; d < D; ++d) delta += doi[d] * oi[d];
        for (std::int64_t j = 0; j < n; ++j) {
          const T* kj = k + at(kv_strides, b, kvh, j);
          const T* vj = v + at(kv_strides, b, kvh, j);
          T dot = 0, dp = 0;
          for (std::int64_t d = 0; d < D; ++d) {
            dot += qi[d] * kj[d];
            dp += doi[d] * vj[d];
          }
          const T p = std::exp(scale * dot - l);
          const T ds = p * (dp - delta) * scale;
          T* dkj = dk + at(kv_strides, b, kvh, j);
          T* dvj = dv + at(kv_strides, b, kvh, j);
          for (std::int64_t d = 0; d < D; ++d) {
            dqi[d] += ds * kj[d];
            dkj[d] += ds * qi[d];
            dvj[d] += p * doi[d];
          }
        }
      }
    }
  }
}

#define KTUNE_INSTANTIATE(T)                                                                                      \
  template void attention_forward<T>(const T*, const T*, const T*, T*, T*, T*, const AttentionShape&,            \
                                     std::int64_t, std::int64_t);                                                  \
  template void attention_forward_streaming<T>(const T*, const T*, const T*, T*, T*, const AttentionShape&,      \
                                               const TensorStrides&, const TensorStrides&, const TensorStrides&, \
                                               const TensorStrides&, T, std::int64_t, std::int64_t,             \
                                               const std::uint8_t*);                                             \
  template void attention_backward_streaming<T>(const T*, const T*, const T*, const T*, const T*, const T*, T*,  \
                                                T*, T*, const AttentionShape&, const TensorStrides&,             \
                                                const TensorStrides&, T, std::int64_t, std::int64_t,             \
                                                const std::uint8_t*);                                            \
  template void attention_backward<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, T*, T*,           \
                                      const AttentionShape&, std::int64_t, std::int64_t);
KTUNE_INSTANTIATE(float)
KTUNE_INSTANTIATE(double)
#undef KTUNE_INSTANTIATE

}  // namespace ktune::templates::attention
