// CPU reference of the global gradient norm and clip-by-norm: the single
// implementation of its math, used as the kernels' reference.
//   norm   = sqrt(sum over every tensor and element of g^2)
//   factor = min(1, max_norm / (norm + 1e-6))   (1 when max_norm <= 0)
//   clip:  g *= factor                          (torch.nn.utils.clip_grad_norm_)
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace ktune::templates::grad_norm {

/// The norm of all `grads` (each a tensor's values), summed in fp64.
double global_norm(const std::vector<std::vector<double>>& grads);
/// The same for fp32 tensors (the model's gradients), summed in fp64 in
/// tensor and index order.
double global_norm(const std::vector<std::span<const float>>& grads);
/// The clip factor for `norm` and `max_norm`: min(1, max_norm / (norm + 1e-6)),
/// NaN for a NaN norm (as torch.clamp keeps it), 1 where max_norm <= 0.
double clip_factor(double norm, double max_norm);
/// Scales every gradient by clip_factor(global_norm(grads), max_norm); returns the norm.
double clip_by_norm(std::vector<std::vector<double>>& grads, double max_norm);

}  // namespace ktune::templates::grad_norm
