// CPU reference of one AdamW step (decoupled weight decay, bias correction),
// the single implementation of its math: kernels are checked against it and
// the cpu backend's optimizer calls it.
#pragma once
#include <cstddef>
#include <cstdint>

namespace ktune::templates::adamw {

/// Hyper-parameters of one step; `step` counts from 1.
struct AdamwHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
  std::int64_t step = 1;
  /// The model's step clips every gradient by their global L2 norm before
  /// AdamW reads it (torch.nn.utils.clip_grad_norm_ with this max_norm);
  /// <= 0 does not clip. The AdamW families take the clip through their
  /// Args::clip, and adamw_step_reference through grad_scale, not from here.
  float max_grad_norm = 0.0f;
};

/// Updates `n` elements in place:
///   p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
///   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
/// Runs on the calling thread; callers split large tensors across threads.
/// Each gradient is read as grad * grad_scale: the clip factor of
/// clip-by-norm (templates/grad_norm/reference.hpp's clip_factor) when the
/// step clips, 1 when it does not.
void adamw_step_reference(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::size_t n,
                          const AdamwHyper& h, float grad_scale = 1.0f);

}  // namespace ktune::templates::adamw
