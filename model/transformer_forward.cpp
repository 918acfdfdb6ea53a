// Forward pass of the Transformer on the cpu backend (see transformer.hpp).
// Row-wise ops split rows over threads, attention splits (batch, head) pairs,
// GEMMs run on OpenBLAS's threads.
#include <fmt/format.h>

#include <algorithm>

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
double Transformer<T>::forward(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets) {
  const std::int64_t N = shape_.tokens(), C = config_.d_model, V = config_.vocab;
  KTUNE_REQUIRE(static_cast<std::int64_t>(tokens.size()) == N && static_cast<std::int64_t>(targets.size()) == N,
                fmt::format("forward needs batch*context = {} tokens and targets, got {} and {}", N, tokens.size(),
                            targets.size()));
  std::copy(tokens.begin(), tokens.end(), tokens_.begin());
  std::copy(targets.begin(), targets.end(), targets_.begin());
  have_forward_ = false;
  const T* P = params_.data();

  T* x0 = act(0) + ll_.x_in;  // (N, C)
  parallel_.for_range(N, [&](std::int64_t b, std::int64_t e, unsigned) {
    tr::embedding::embedding_forward(tokens_.data() + b, P + layout_.embedding, x0 + b * C, e - b, C, V);
  });
  for (std::int64_t l = 0; l < config_.layers; ++l) forward_block(l);

  T* f = final_acts_.data();
  const T eps = static_cast<T>(config_.norm_eps);
  parallel_.for_range(N, [&](std::int64_t b, std::int64_t e, unsigned) {
    tr::rmsnorm::rmsnorm_forward(f + fl_.x + b * C, P + layout_.ln_final, f + fl_.ln + b * C, f + fl_.rstd + b, e - b,
                                 C, eps);
  });
  linear_forward(f + fl_.ln, P + layout_.lm_head, f + fl_.logits, N, C, V);  // (N, V)
  parallel_.for_range(N, [&](std::int64_t b, std::int64_t e, unsigned) {
    tr::cross_entropy::cross_entropy_forward(f + fl_.logits + b * V, targets_.data() + b, f + fl_.losses + b,
                                             f + fl_.lse + b, e - b, V);
  });
  double sum = 0;
  for (std::int64_t i = 0; i < N; ++i) sum += static_cast<double>(f[fl_.losses + i]);
  have_forward_ = true;
  return sum / static_cast<double>(N);
}

template <class T>
void Transformer<T>::forward_block(std::int64_t l) {
  const std::int64_t N = shape_.tokens(), C = config_.d_model, F = config_.d_ff;
  const std::int64_t H = config_.heads, D = config_.head_dim(), S = shape_.context;
  const T eps = static_cast<T>(config_.norm_eps);
  const T* P = params_.data();
  const BlockParams& bp = layout_.blocks[l];
  T* a = act(l);
  T* w = work_.data();
  const tr::attention::AttentionShape as{shape_.batch, S, H, D, true};
  const std::int64_t scratch = tr::attention::scratch_elements(as);

  // Attention branch: x_mid = x_in + W_o attn(rope(W_q ln1), rope(W_k ln1), W_v ln1)
  parallel_.for_range(N, [&](std::int64_t b, std::int64_t e, unsigned) {
    tr::rmsnorm::rmsnorm_forward(a + ll_.x_in + b * C, P + bp.ln1, a + ll_.ln1 + b * C, a + ll_.rstd1 + b, e - b, C,
                                 eps);
  });
  linear_forward(a + ll_.ln1, P + bp.q, a + ll_.q, N, C, C);  // (N, H, D)
  linear_forward(a + ll_.ln1, P + bp.k, a + ll_.k, N, C, C);
  linear_forward(a + ll_.ln1, P + bp.v, a + ll_.v, N, C, C);
  parallel_.for_range(N, [&](std::int64_t b, std::int64_t e, unsigned) {
    tr::rope::rope_forward(a + ll_.q, a + ll_.q, w + wl_.rope_cos, w + wl_.rope_sin, S, H, D, b, e);
    tr::rope::rope_forward(a + ll_.k, a + ll_.k, w + wl_.rope_cos, w + wl_.rope_sin, S, H, D, b, e);
  });
  parallel_.for_range(shape_.batch * H, [&](std::int64_t b, std::int64_t e, unsigned c) {
    tr::attention::attention_forward(a + ll_.q, a + ll_.k, a + ll_.v, a + ll_.probs, a + ll_.attn,
                                     w + wl_.attn_scratch + c * scratch, as, b, e);
  });
  linear_forward(a + ll_.attn, P + bp.o, a + ll_.x_mid, N, C, C);
  parallel_.for_range(N, [&](std::int64_t b, std::int64_t e, unsigned) {
    tr::residual::residual_add(a + ll_.x_mid + b * C, a + ll_.x_in + b * C, (e - b) * C);
  });

  // Feed-forward branch: x_out = x_mid + W2 (silu(W1 ln2) * W3 ln2)
  parallel_.for_range(N, [&](std::int64_t b, std::int64_t e, unsigned) {
    tr::rmsnorm::rmsnorm_forward(a + ll_.x_mid + b * C, P + bp.ln2, a + ll_.ln2 + b * C, a + ll_.rstd2 + b, e - b, C,
                                 eps);
  });
  linear_forward(a + ll_.ln2, P + bp.w1, a + ll_.a, N, C, F);  // (N, F)
  linear_forward(a + ll_.ln2, P + bp.w3, a + ll_.b, N, C, F);
  parallel_.for_range(N, [&](std::int64_t b, std::int64_t e, unsigned) {
    tr::swiglu::swiglu_forward(a + ll_.a + b * F, a + ll_.b + b * F, a + ll_.h + b * F, (e - b) * F);
  });
  // The next block's input (its own slot when training; this slot's x_in,
  // no longer needed, when forward-only), or the final stream.
  T* next = l + 1 < config_.layers ? act(l + 1) + ll_.x_in : final_acts_.data() + fl_.x;
  linear_forward(a + ll_.h, P + bp.w2, next, N, F, C);
  parallel_.for_range(N, [&](std::int64_t b, std::int64_t e, unsigned) {
    tr::residual::residual_add(next + b * C, a + ll_.x_mid + b * C, (e - b) * C);
  });
}

template double Transformer<float>::forward(std::span<const std::int32_t>, std::span<const std::int32_t>);
template double Transformer<double>::forward(std::span<const std::int32_t>, std::span<const std::int32_t>);
template void Transformer<float>::forward_block(std::int64_t);
template void Transformer<double>::forward_block(std::int64_t);

}  // namespace ktune::model
