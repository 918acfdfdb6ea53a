#include "templates/adamw/reference.hpp"

#include <cmath>

namespace ktune::templates::adamw {

void adamw_step_reference(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::size_t n,
                          const AdamwHyper& h, float grad_scale) {
  const double t = static_cast<double>(h.step);
  const float bias_correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(h.beta1), t));
  const float bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(h.beta2), t)));
  const float step_size = h.lr / bias_correction1;
  const float decay = 1.0f - h.lr * h.weight_decay;
  for (std::size_t i = 0; i < n; ++i) {
    const float g = grad[i] * grad_scale;
    float m = h.beta1 * exp_avg[i] + (1.0f - h.beta1) * g;
    float v = h.beta2 * exp_avg_sq[i] + (1.0f - h.beta2) * g * g;
    const float denom = std::sqrt(v) / bias_correction2_sqrt + h.eps;
    param[i] = param[i] * decay - step_size * (m / denom);
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
  }
}

}  // namespace ktune::templates::adamw
