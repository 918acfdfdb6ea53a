// The cpu backend's ops (see cpu_ops.hpp): row-wise ops split rows over
// threads, attention splits (batch, head) pairs (each pair's GEMMs on one
// OpenBLAS thread), other GEMMs split their output into blocks of a fixed
// size, each block's GEMM on one OpenBLAS thread.
#include "model/ops/cpu_ops.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <type_traits>
#include <vector>

#include "base/error.hpp"
#include "model/gemm.hpp"
#include "templates/attention/reference.hpp"
#include "templates/cross_entropy/reference.hpp"
#include "templates/embedding/reference.hpp"
#include "templates/grad_norm/reference.hpp"
#include "templates/residual/reference.hpp"
#include "templates/rmsnorm/reference.hpp"
#include "templates/rope/reference.hpp"
#include "templates/softmax/reference.hpp"
#include "templates/swiglu/reference.hpp"

namespace ktune::model {

namespace tr = ktune::templates;

template <class T>
CpuOps<T>::CpuOps(const std::array<void*, kRegionCount>& bases, const WorkspaceLayout& work, Parallel& parallel)
    : bases_(bases), work_(work), parallel_(parallel) {}

template <class T>
T* CpuOps<T>::at(Ref r) const {
  void* base = bases_[static_cast<int>(r.region)];
  KTUNE_REQUIRE(base != nullptr, "the cpu backend's run has no " + region_name(r.region) + " region");
  return static_cast<T*>(base) + r.offset;
}

template <class T>
const std::int32_t* CpuOps<T>::ints(Ref r) const {
  void* base = bases_[static_cast<int>(r.region)];
  KTUNE_REQUIRE(base != nullptr, "the cpu backend's run has no " + region_name(r.region) + " region");
  return static_cast<const std::int32_t*>(base) + r.offset;
}

template <class T>
void CpuOps<T>::rope_tables(Ref cos, Ref sin, std::int64_t seq, std::int64_t head_dim, double theta) {
  tr::rope::rope_tables<T>(seq, head_dim, theta, at(cos), at(sin));
}

namespace {

// Rows or columns of a GEMM's output one OpenBLAS call takes (CpuOps::gemm).
constexpr std::int64_t kGemmBlock = 64;

// Runs fn over [0, n) on the run's threads, each range's GEMMs on one
// OpenBLAS thread, then gives OpenBLAS the run's threads back.
template <class Fn>
void one_gemm_thread_each(Parallel& parallel, std::int64_t n, Fn&& fn) {
  set_gemm_threads(1);
  try {
    parallel.for_range(n, fn);
  } catch (...) {
    set_gemm_threads(parallel.threads());
    throw;
  }
  set_gemm_threads(parallel.threads());
}

}  // namespace

// OpenBLAS on several threads may add up a GEMM's k in other chunks than on
// one (0.3.21 does for a k of a few hundred that is not a multiple of 32: a
// weight gradient's rows at ctx 100), and so change its last bits with the
// thread count. The output is split here by its shape alone, into blocks of
// kGemmBlock rows or columns (of its longer side), each one OpenBLAS call on
// one thread, the threads taking the blocks: the same sums at any count.
template <class T>
void CpuOps<T>::gemm(const GemmOp& g) {
  const bool by_rows = g.m >= g.n;
  const std::int64_t side = by_rows ? g.m : g.n;
  const std::int64_t blocks = (side + kGemmBlock - 1) / kGemmBlock;
  one_gemm_thread_each(parallel_, g.batch * blocks, [&](std::int64_t begin, std::int64_t end, unsigned) {
    for (std::int64_t job = begin; job < end; ++job) {
      const std::int64_t i = job / blocks, first = job % blocks * kGemmBlock;
      const std::int64_t count = std::min(kGemmBlock, side - first);
      const T* a = at(g.a + i * g.stride_a);
      const T* b = at(g.b + i * g.stride_b);
      T* c = at(g.c + i * g.stride_c);
      if (by_rows)  // rows [first, first + count) of C: those of op(A), rows of A or (transposed) its columns
        gemm_rowmajor<T>(g.trans_a, g.trans_b, count, g.n, g.k, static_cast<T>(g.alpha),
                         a + (g.trans_a ? first : first * g.lda), g.lda, b, g.ldb, static_cast<T>(g.beta),
                         c + first * g.ldc, g.ldc);
      else  // columns [first, first + count) of C: those of op(B), columns of B or (transposed) its rows
        gemm_rowmajor<T>(g.trans_a, g.trans_b, g.m, count, g.k, static_cast<T>(g.alpha), a, g.lda,
                         b + (g.trans_b ? first * g.ldb : first), g.ldb, static_cast<T>(g.beta), c + first, g.ldc);
    }
  });
}

template <class T>
void CpuOps<T>::embedding_forward(Ref tokens, Ref table, Ref out, std::int64_t rows, std::int64_t dim,
                                  std::int64_t vocab) {
  const std::int32_t* t = ints(tokens);
  const T* w = at(table);
  T* o = at(out);
  parallel_.for_range(rows, [&](std::int64_t b, std::int64_t e, unsigned) {
    tr::embedding::embedding_forward(t + b, w, o + b * dim, e - b, dim, vocab);
  });
}

template <class T>
void CpuOps<T>::embedding_backward(Ref tokens, Ref dout, Ref dtable, std::int64_t rows, std::int64_t dim,
                                   std::int64_t vocab) {
  const std::int32_t* t = ints(tokens);
  const T* d = at(dout);
  T* dt = at(dtable);
  for (std::int64_t r = 0; r < rows; ++r)  // as the forward: a row of the table outside it is never written
    KTUNE_REQUIRE(t[r] >= 0 && t[r] < vocab, fmt::format("token {} at position {} is outside the vocabulary [0, {})",
                                                         t[r], r, vocab));
  std::fill(dt, dt + vocab * dim, T(0));
  parallel_.for_range(dim, [&](std::int64_t b, std::int64_t e, unsigned) {
    tr::embedding::embedding_backward(t, d, dt, rows, dim, b, e);
  });
}

template <class T>
void CpuOps<T>::rmsnorm_forward(Ref x, Ref w, Ref y, Ref rstd, std::int64_t rows, std::int64_t dim, double eps) {
  const T* px = at(x);
  const T* pw = at(w);
  T* py = at(y);
  T* pr = at(rstd);
  parallel_.for_range(rows, [&](std::int64_t b, std::int64_t e, unsigned) {
    tr::rmsnorm::rmsnorm_forward(px + b * dim, pw, py + b * dim, pr + b, e - b, dim, static_cast<T>(eps));
  });
}

template <class T>
template <class Share>
void CpuOps<T>::norm_backward_rows(Ref dw, std::int64_t rows, std::int64_t dim, Share share) {
  KTUNE_REQUIRE(work_.norm_dw + kNormDwChunks * dim <= work_.size,
                "rmsnorm backward needs the workspace of a training run");
  T* partial = at({Region::kWork, work_.norm_dw});  // (kNormDwChunks, dim) weight gradients per chunk of rows
  std::fill(partial, partial + kNormDwChunks * dim, T(0));
  parallel_.for_range(kNormDwChunks, [&](std::int64_t first, std::int64_t last, unsigned) {
    for (std::int64_t c = first; c < last; ++c)
      if (rows * c / kNormDwChunks < rows * (c + 1) / kNormDwChunks)
        share(rows * c / kNormDwChunks, rows * (c + 1) / kNormDwChunks, partial + c * dim);
  });
  T* pdw = at(dw);
  for (std::int64_t j = 0; j < dim; ++j) {
    T sum = 0;
    for (std::int64_t c = 0; c < kNormDwChunks; ++c) sum += partial[c * dim + j];
    pdw[j] = sum;
  }
}

template <class T>
void CpuOps<T>::rmsnorm_backward(Ref x, Ref w, Ref rstd, Ref dy, Ref dx, Ref dw, std::int64_t rows,
                                 std::int64_t dim) {
  const T* px = at(x);
  const T* pw = at(w);
  const T* pr = at(rstd);
  const T* pdy = at(dy);
  T* pdx = at(dx);
  norm_backward_rows(dw, rows, dim, [&](std::int64_t b, std::int64_t e, T* dw_partial) {
    tr::rmsnorm::rmsnorm_backward(px + b * dim, pw, pr + b, pdy + b * dim, pdx + b * dim, dw_partial, e - b, dim);
  });
}

// The residual reference, then the RMSNorm reference on h, each thread over
// its rows: every element and row computed as by a separate residual add and
// rmsnorm_forward, bit for bit (x + r and r + x are the same float).
template <class T>
void CpuOps<T>::residual_rmsnorm_forward(Ref x, Ref r, Ref w, Ref h, Ref y, Ref rstd, std::int64_t rows,
                                         std::int64_t dim, double eps) {
  const T* px = at(x);
  const T* pr = at(r);
  const T* pw = at(w);
  T* ph = at(h);
  T* py = at(y);
  T* ps = at(rstd);
  const T* added = ph == px ? pr : px;  // h = x: h += r; h = r or neither: h = r, h += x
  parallel_.for_range(rows, [&](std::int64_t b, std::int64_t e, unsigned) {
    T* hb = ph + b * dim;
    if (ph != px && ph != pr) std::copy(pr + b * dim, pr + e * dim, hb);
    tr::residual::residual_add(hb, added + b * dim, (e - b) * dim);
    tr::rmsnorm::rmsnorm_forward(hb, pw, py + b * dim, ps + b, e - b, dim, static_cast<T>(eps));
  });
}

// The norm's dx row by row into a row of the thread's own, then the residual
// backward adds it to the stream: each row's arithmetic and each dw
// accumulation as rmsnorm_backward's followed by a separate residual add.
template <class T>
void CpuOps<T>::residual_rmsnorm_backward(Ref h, Ref w, Ref rstd, Ref dy, Ref dstream, Ref dh, Ref dw,
                                          std::int64_t rows, std::int64_t dim) {
  const T* ph = at(h);
  const T* pw = at(w);
  const T* pr = at(rstd);
  const T* pdy = at(dy);
  const T* pds = at(dstream);
  T* pdh = at(dh);
  norm_backward_rows(dw, rows, dim, [&](std::int64_t b, std::int64_t e, T* dw_partial) {
    std::vector<T> dx(static_cast<std::size_t>(dim));
    for (std::int64_t row = b; row < e; ++row) {
      const std::int64_t o = row * dim;
      tr::rmsnorm::rmsnorm_backward(ph + o, pw, pr + row, pdy + o, dx.data(), dw_partial, 1, dim);
      if (pdh != pds) std::copy(pds + o, pds + o + dim, pdh + o);
      tr::residual::residual_backward(pdh + o, dx.data(), dim);
    }
  });
}

template <class T>
void CpuOps<T>::rope_forward(Ref x, Ref cos, Ref sin, std::int64_t tokens, std::int64_t seq, std::int64_t heads,
                             std::int64_t head_dim, std::int64_t row_stride) {
  if (row_stride != heads * head_dim) throw_error(ErrorKind::kInternal, "the cpu backend rotates contiguous rows");
  T* px = at(x);
  const T* c = at(cos);
  const T* s = at(sin);
  parallel_.for_range(tokens, [&](std::int64_t b, std::int64_t e, unsigned) {
    tr::rope::rope_forward(px, px, c, s, seq, heads, head_dim, b, e);
  });
}

template <class T>
void CpuOps<T>::rope_backward(Ref dx, Ref cos, Ref sin, std::int64_t tokens, std::int64_t seq, std::int64_t heads,
                              std::int64_t head_dim, std::int64_t row_stride) {
  if (row_stride != heads * head_dim) throw_error(ErrorKind::kInternal, "the cpu backend rotates contiguous rows");
  T* p = at(dx);
  const T* c = at(cos);
  const T* s = at(sin);
  parallel_.for_range(tokens, [&](std::int64_t b, std::int64_t e, unsigned) {
    tr::rope::rope_backward(p, p, c, s, seq, heads, head_dim, b, e);
  });
}

namespace {

// Attention of heads [bh_begin, bh_end) on OpenBLAS, (batch, seq, heads,
// head_dim) q, k, v, out: the reference's math (tr::attention), its row
// loops as GEMMs over blocks of kAttentionRowBlock query rows, each block's
// GEMMs only over the keys its rows see under the causal mask. The caller
// runs the GEMMs single-threaded, a thread per range of heads.
constexpr std::int64_t kRowBlock = kAttentionRowBlock;

template <class T>
void attention_forward_heads(const T* q, const T* k, const T* v, T* probs, T* out,
                             const tr::attention::AttentionShape& s, std::int64_t bh_begin, std::int64_t bh_end) {
  const std::int64_t S = s.seq, D = s.head_dim, ld = s.heads * D;
  const T scale = T(1) / std::sqrt(static_cast<T>(D));
  for (std::int64_t bh = bh_begin; bh < bh_end; ++bh) {
    const std::int64_t b = bh / s.heads, h = bh % s.heads;
    const std::int64_t head = b * S * ld + h * D;  // row 0 of the head in q, k, v and out
    T* p = probs + bh * S * S;                      // (S, S)
    for (std::int64_t i0 = 0; i0 < S; i0 += kRowBlock) {
      const std::int64_t rows = std::min(kRowBlock, S - i0);
      const std::int64_t keys = s.causal ? i0 + rows : S;  // keys the block's last row sees
      T* pb = p + i0 * S;
      // Scores of the block's rows, scale q . k_j, then each row's softmax over the keys it sees; zeros after.
      gemm_rowmajor(false, true, rows, keys, D, scale, q + head + i0 * ld, ld, k + head, ld, T(0), pb, S);
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t n = s.causal ? i0 + r + 1 : S;
        T* pr = pb + r * S;
        tr::softmax::softmax_forward(pr, pr, 1, n);
        std::fill(pr + n, pr + S, T(0));
      }
      gemm_rowmajor(false, false, rows, D, keys, T(1), pb, S, v + head, ld, T(0), out + head + i0 * ld, ld);
    }
  }
}

// `scratch` holds attention_scratch_elements values: a block's dP, then its dS.
template <class T>
void attention_backward_heads(const T* q, const T* k, const T* v, const T* probs, const T* dout, T* dq, T* dk, T* dv,
                              T* scratch, const tr::attention::AttentionShape& s, std::int64_t bh_begin,
                              std::int64_t bh_end) {
  const std::int64_t S = s.seq, D = s.head_dim, ld = s.heads * D;
  const T scale = T(1) / std::sqrt(static_cast<T>(D));
  for (std::int64_t bh = bh_begin; bh < bh_end; ++bh) {
    const std::int64_t b = bh / s.heads, h = bh % s.heads;
    const std::int64_t head = b * S * ld + h * D;
    const T* p = probs + bh * S * S;
    for (std::int64_t j = 0; j < S; ++j) {  // dK and dV sum over the blocks
      std::fill_n(dk + head + j * ld, D, T(0));
      std::fill_n(dv + head + j * ld, D, T(0));
    }
    for (std::int64_t i0 = 0; i0 < S; i0 += kRowBlock) {
      const std::int64_t rows = std::min(kRowBlock, S - i0);
      const std::int64_t keys = s.causal ? i0 + rows : S;
      const T* pb = p + i0 * S;
      const T* dob = dout + head + i0 * ld;
      // dV_j += sum_i P[i, j] dO_i; dP = dO V^T (row stride `keys`).
      gemm_rowmajor(true, false, keys, D, rows, T(1), pb, S, dob, ld, T(1), dv + head, ld);
      gemm_rowmajor(false, true, rows, keys, D, T(1), dob, ld, v + head, ld, T(0), scratch, keys);
      // dS = P * (dP - sum(dP * P)), folded with the score scale, zero where the mask hid the key.
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t n = s.causal ? i0 + r + 1 : S;
        T* dsr = scratch + r * keys;
        tr::softmax::softmax_backward(pb + r * S, dsr, dsr, 1, n, scale, false);
        std::fill(dsr + n, dsr + keys, T(0));
      }
      // dQ_i = sum_j dS[i, j] k_j; dK_j += sum_i dS[i, j] q_i.
      gemm_rowmajor(false, false, rows, D, keys, T(1), scratch, keys, k + head, ld, T(0), dq + head + i0 * ld, ld);
      gemm_rowmajor(true, false, keys, D, rows, T(1), scratch, keys, q + head + i0 * ld, ld, T(1), dk + head, ld);
    }
  }
}

}  // namespace

template <class T>
void CpuOps<T>::attention_forward(Ref q, Ref k, Ref v, Ref saved, Ref out,
                                  const templates::attention::AttentionShape& s, std::int64_t qkv_row) {
  if (qkv_row != s.heads * s.head_dim)
    throw_error(ErrorKind::kInternal, "the cpu backend's attention reads separate q, k and v");
  const T *pq = at(q), *pk = at(k), *pv = at(v);
  T *probs = at(saved), *po = at(out);
  one_gemm_thread_each(parallel_, s.batch * s.heads, [&](std::int64_t b, std::int64_t e, unsigned) {
    attention_forward_heads(pq, pk, pv, probs, po, s, b, e);
  });
}

template <class T>
void CpuOps<T>::attention_backward(Ref q, Ref k, Ref v, Ref /*out*/, Ref saved, Ref dout, Ref dq, Ref dk, Ref dv,
                                   const templates::attention::AttentionShape& s, std::int64_t qkv_row) {
  if (qkv_row != s.heads * s.head_dim)
    throw_error(ErrorKind::kInternal, "the cpu backend's attention reads separate q, k and v");
  const std::int64_t scratch = attention_scratch_elements(s);
  T* w = at({Region::kWork, work_.attn_scratch});
  const T *pq = at(q), *pk = at(k), *pv = at(v), *probs = at(saved), *pdo = at(dout);
  T *pdq = at(dq), *pdk = at(dk), *pdv = at(dv);
  one_gemm_thread_each(parallel_, s.batch * s.heads, [&](std::int64_t b, std::int64_t e, unsigned c) {
    attention_backward_heads(pq, pk, pv, probs, pdo, pdq, pdk, pdv, w + c * scratch, s, b, e);
  });
}

template <class T>
void CpuOps<T>::swiglu_forward(Ref a, Ref b, Ref h, std::int64_t n) {
  const T *pa = at(a), *pb = at(b);
  T* ph = at(h);
  parallel_.for_range(n, [&](std::int64_t lo, std::int64_t hi, unsigned) {
    tr::swiglu::swiglu_forward(pa + lo, pb + lo, ph + lo, hi - lo);
  });
}

template <class T>
void CpuOps<T>::swiglu_backward(Ref a, Ref b, Ref dh, Ref da, Ref db, std::int64_t n) {
  const T *pa = at(a), *pb = at(b), *pdh = at(dh);
  T *pda = at(da), *pdb = at(db);
  parallel_.for_range(n, [&](std::int64_t lo, std::int64_t hi, unsigned) {
    tr::swiglu::swiglu_backward(pa + lo, pb + lo, pdh + lo, pda + lo, pdb + lo, hi - lo);
  });
}

template <class T>
void CpuOps<T>::cross_entropy_forward(Ref logits, Ref targets, Ref losses, Ref lse, std::int64_t rows,
                                      std::int64_t vocab) {
  const T* pl = at(logits);
  const std::int32_t* t = ints(targets);
  T *ploss = at(losses), *plse = at(lse);
  parallel_.for_range(rows, [&](std::int64_t b, std::int64_t e, unsigned) {
    tr::cross_entropy::cross_entropy_forward(pl + b * vocab, t + b, ploss + b, plse + b, e - b, vocab);
  });
}

template <class T>
void CpuOps<T>::cross_entropy_backward(Ref logits, Ref targets, Ref lse, Ref dlogits, std::int64_t rows,
                                       std::int64_t vocab, std::int64_t mean_over) {
  const T* pl = at(logits);
  const std::int32_t* t = ints(targets);
  const T* plse = at(lse);
  T* pd = at(dlogits);
  const T scale = T(1) / static_cast<T>(mean_over);  // d mean / d row loss
  parallel_.for_range(rows, [&](std::int64_t b, std::int64_t e, unsigned) {
    tr::cross_entropy::cross_entropy_backward(pl + b * vocab, t + b, plse + b, scale, pd + b * vocab, e - b, vocab);
  });
}

template <class T>
void CpuOps<T>::accumulate(Ref x, Ref y, std::int64_t n) {
  const T* px = at(x);
  T* py = at(y);
  parallel_.for_range(n, [&](std::int64_t b, std::int64_t e, unsigned) {
    for (std::int64_t i = b; i < e; ++i) py[i] += px[i];
  });
}

template <class T>
double CpuOps<T>::mean(Ref values, std::int64_t n) {
  const T* p = at(values);
  double sum = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += static_cast<double>(p[i]);
  return sum / static_cast<double>(n);
}

template <class T>
void CpuOps<T>::adamw_step(const std::vector<AdamwTensor>& tensors, const templates::adamw::AdamwHyper& hyper) {
  if constexpr (std::is_same_v<T, float>) {
    // Clip-by-norm first: the global norm of every gradient in fp64, and
    // AdamW reads each gradient scaled by its clip factor.
    float clip = 1.0f;
    clipped_norm_.reset();
    if (hyper.max_grad_norm > 0) {
      std::vector<std::span<const float>> grads;
      for (const auto& t : tensors) grads.emplace_back(at(t.grad), static_cast<std::size_t>(t.numel));
      clipped_norm_ = templates::grad_norm::global_norm(grads);
      clip = static_cast<float>(templates::grad_norm::clip_factor(*clipped_norm_, hyper.max_grad_norm));
    }
    for (const auto& t : tensors) {
      float *p = at(t.param), *m = at(t.exp_avg), *v = at(t.exp_avg_sq);
      const float* g = at(t.grad);
      parallel_.for_range(t.numel, [&](std::int64_t b, std::int64_t e, unsigned) {
        templates::adamw::adamw_step_reference(p + b, g + b, m + b, v + b, static_cast<std::size_t>(e - b), hyper,
                                               clip);
      });
    }
  } else {
    (void)tensors, (void)hyper;
    throw Error(ErrorKind::kInvalidInput, "AdamW runs on fp32 parameters only");
  }
}

template class CpuOps<float>;
template class CpuOps<double>;

}  // namespace ktune::model
