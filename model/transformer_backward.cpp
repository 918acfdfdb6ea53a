// Hand-written backward pass of the Transformer on the cpu backend (see
// transformer.hpp): the forward's ops in reverse, each through its family's
// CPU reference backward, GEMMs through OpenBLAS.
#include <algorithm>
#include <cstring>

#include "base/error.hpp"
#include "model/gemm.hpp"
#include "model/transformer.hpp"
#include "templates/attention/reference.hpp"
#include "templates/cross_entropy/reference.hpp"
#include "templates/embedding/reference.hpp"
#include "templates/residual/reference.hpp"
#include "templates/rmsnorm/reference.hpp"
#include "templates/rope/reference.hpp"
#include "templates/swiglu/reference.hpp"

namespace ktune::model {

namespace tr = ktune::templates;

template <class T>
void Transformer<T>::norm_backward(const T* x, const T* w, const T* rstd, const T* dy, T* dx, T* dw) {
  const std::int64_t N = shape_.tokens(), C = config_.d_model;
  T* partial = work_.data() + wl_.norm_dw;  // (threads, C)
  std::fill(partial, partial + parallel_.threads() * C, T(0));
  parallel_.for_range(N, [&](std::int64_t b, std::int64_t e, unsigned c) {
    tr::rmsnorm::rmsnorm_backward(x + b * C, w, rstd + b, dy + b * C, dx + b * C, partial + c * C, e - b, C);
  });
  for (std::int64_t j = 0; j < C; ++j) {
    T sum = 0;
    for (unsigned t = 0; t < parallel_.threads(); ++t) sum += partial[t * C + j];
    dw[j] = sum;
  }
}

template <class T>
void Transformer<T>::backward() {
  KTUNE_REQUIRE(allocation_ == Allocation::kTrain, "backward needs a model built for training, not forward-only");
  KTUNE_REQUIRE(have_forward_, "backward needs a forward pass first");
  have_forward_ = false;  // the backward overwrites the logits
  const std::int64_t N = shape_.tokens(), C = config_.d_model, V = config_.vocab;
  const T* P = params_.data();
  T* G = grads_.data();
  T* f = final_acts_.data();
  T* w = work_.data();
  T* dlogits = f + fl_.logits;  // (N, V), in place over the logits

  const T scale = T(1) / static_cast<T>(N);  // d mean / d row loss
  parallel_.for_range(N, [&](std::int64_t b, std::int64_t e, unsigned) {
    tr::cross_entropy::cross_entropy_backward(f + fl_.logits + b * V, targets_.data() + b, f + fl_.lse + b, scale,
                                              dlogits + b * V, e - b, V);
  });
  linear_backward_weight(dlogits, f + fl_.ln, G + layout_.lm_head, N, C, V);
  linear_backward_input(dlogits, P + layout_.lm_head, w + wl_.dtmp, N, C, V);
  norm_backward(f + fl_.x, P + layout_.ln_final, f + fl_.rstd, w + wl_.dtmp, w + wl_.dx, G + layout_.ln_final);

  for (std::int64_t l = config_.layers - 1; l >= 0; --l) backward_block(l);

  T* demb = G + layout_.embedding;  // (V, C)
  std::fill(demb, demb + V * C, T(0));
  parallel_.for_range(C, [&](std::int64_t b, std::int64_t e, unsigned) {
    tr::embedding::embedding_backward(tokens_.data(), w + wl_.dx, demb, N, C, b, e);
  });
}

template <class T>
void Transformer<T>::backward_block(std::int64_t l) {
  const std::int64_t N = shape_.tokens(), C = config_.d_model, F = config_.d_ff;
  const std::int64_t H = config_.heads, D = config_.head_dim(), S = shape_.context;
  const T* P = params_.data();
  T* G = grads_.data();
  const BlockParams& bp = layout_.blocks[l];
  T* a = act(l);
  T* w = work_.data();
  T* dx = w + wl_.dx;  // (N, C) gradient of the block's output, then of its input

  // Feed-forward branch.
  T* dh = w + wl_.dh;  // (N, F): dh, then da in place
  T* db = w + wl_.db;  // (N, F)
  linear_backward_weight(dx, a + ll_.h, G + bp.w2, N, F, C);
  linear_backward_input(dx, P + bp.w2, dh, N, F, C);
  parallel_.for_range(N, [&](std::int64_t b, std::int64_t e, unsigned) {
    tr::swiglu::swiglu_backward(a + ll_.a + b * F, a + ll_.b + b * F, dh + b * F, dh + b * F, db + b * F, (e - b) * F);
  });
  linear_backward_weight(dh, a + ll_.ln2, G + bp.w1, N, C, F);
  linear_backward_weight(db, a + ll_.ln2, G + bp.w3, N, C, F);
  linear_backward_input(dh, P + bp.w1, w + wl_.dtmp, N, C, F);
  linear_backward_input(db, P + bp.w3, w + wl_.dtmp, N, C, F, T(1));
  norm_backward(a + ll_.x_mid, P + bp.ln2, a + ll_.rstd2, w + wl_.dtmp, w + wl_.dbranch, G + bp.ln2);
  parallel_.for_range(N, [&](std::int64_t b, std::int64_t e, unsigned) {
    tr::residual::residual_backward(dx + b * C, w + wl_.dbranch + b * C, (e - b) * C);
  });

  // Attention branch.
  T* dattn = w + wl_.dbranch;  // (N, C)
  linear_backward_weight(dx, a + ll_.attn, G + bp.o, N, C, C);
  linear_backward_input(dx, P + bp.o, dattn, N, C, C);
  const tr::attention::AttentionShape as{shape_.batch, S, H, D, true};
  const std::int64_t scratch = tr::attention::scratch_elements(as);
  T* dq = w + wl_.dq;
  T* dk = w + wl_.dk;
  T* dv = w + wl_.dv;
  parallel_.for_range(shape_.batch * H, [&](std::int64_t b, std::int64_t e, unsigned c) {
    tr::attention::attention_backward(a + ll_.q, a + ll_.k, a + ll_.v, a + ll_.probs, dattn, dq, dk, dv,
                                      w + wl_.attn_scratch + c * scratch, as, b, e);
  });
  parallel_.for_range(N, [&](std::int64_t b, std::int64_t e, unsigned) {
    tr::rope::rope_backward(dq, dq, w + wl_.rope_cos, w + wl_.rope_sin, S, H, D, b, e);
    tr::rope::rope_backward(dk, dk, w + wl_.rope_cos, w + wl_.rope_sin, S, H, D, b, e);
  });
  linear_backward_weight(dq, a + ll_.ln1, G + bp.q, N, C, C);
  linear_backward_weight(dk, a + ll_.ln1, G + bp.k, N, C, C);
  linear_backward_weight(dv, a + ll_.ln1, G + bp.v, N, C, C);
  linear_backward_input(dq, P + bp.q, w + wl_.dtmp, N, C, C);
  linear_backward_input(dk, P + bp.k, w + wl_.dtmp, N, C, C, T(1));
  linear_backward_input(dv, P + bp.v, w + wl_.dtmp, N, C, C, T(1));
  norm_backward(a + ll_.x_in, P + bp.ln1, a + ll_.rstd1, w + wl_.dtmp, w + wl_.dbranch, G + bp.ln1);
  parallel_.for_range(N, [&](std::int64_t b, std::int64_t e, unsigned) {
    tr::residual::residual_backward(dx + b * C, w + wl_.dbranch + b * C, (e - b) * C);
  });
}

template void Transformer<float>::backward();
template void Transformer<double>::backward();
template void Transformer<float>::backward_block(std::int64_t);
template void Transformer<double>::backward_block(std::int64_t);
template void Transformer<float>::norm_backward(const float*, const float*, const float*, const float*, float*,
                                                float*);
template void Transformer<double>::norm_backward(const double*, const double*, const double*, const double*, double*,
                                                 double*);

}  // namespace ktune::model
