// CPU reference of softmax cross-entropy over the vocabulary, forward and
// backward: the single implementation of its math, used by the cpu backend
// and as the kernel reference.
//   loss_r = logsumexp(logits_r) - logits_r[target_r]
#pragma once
#include <cstdint>

namespace ktune::templates::cross_entropy {

/// Per-row losses for `rows` rows of `vocab` logits. logits (rows, vocab);
/// targets (rows,); losses (rows,); lse (rows,) receives logsumexp, kept for
/// the backward. Throws kInvalidInput for a target outside [0, vocab).
template <class T>
void cross_entropy_forward(const T* logits, const std::int32_t* targets, T* losses, T* lse, std::int64_t rows,
                           std::int64_t vocab);

/// dlogits = scale * (softmax(logits) - onehot(target)), where scale is the
/// gradient of the total loss w.r.t. each row's loss (1/N for a mean over N
/// rows). dlogits may alias logits.
template <class T>
void cross_entropy_backward(const T* logits, const std::int32_t* targets, const T* lse, T scale, T* dlogits,
                            std::int64_t rows, std::int64_t vocab);

}  // namespace ktune::templates::cross_entropy
