// Global gradient norm and clip-by-norm (see reference.hpp).
#include "templates/grad_norm/reference.hpp"

#include <cmath>

namespace ktune::templates::grad_norm {

double global_norm(const std::vector<std::vector<double>>& grads) {
  double sum = 0.0;
  for (const auto& g : grads)
    for (double x : g) sum += x * x;
  return std::sqrt(sum);
}

double global_norm(const std::vector<std::span<const float>>& grads) {
  double sum = 0.0;
  for (const auto& g : grads)
    for (float x : g) sum += static_cast<double>(x) * static_cast<double>(x);
  return std::sqrt(sum);
}

double clip_factor(double norm, double max_norm) {
  if (max_norm <= 0.0) return 1.0;
  const double f = max_norm / (norm + 1e-6);
  return f >= 1.0 ? 1.0 : f;  // NaN for a NaN norm, as torch.clamp(max=1) gives
}

double clip_by_norm(std::vector<std::vector<double>>& grads, double max_norm) {
  const double norm = global_norm(grads);
  const double f = clip_factor(norm, max_norm);
  for (auto& g : grads)
    for (double& x : g) x *= f;
  return norm;
}

}  // namespace ktune::templates::grad_norm
