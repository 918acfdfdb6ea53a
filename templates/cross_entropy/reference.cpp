// Cross-entropy forward and backward (see reference.hpp).
#include "templates/cross_entropy/reference.hpp"

#include <cmath>
#include <string>

#include "base/error.hpp"

namespace ktune::templates::cross_entropy {

template <class T>
void cross_entropy_forward(const T* logits, const std::int32_t* targets, T* losses, T* lse, std::int64_t rows,
                           std::int64_t vocab) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* lr = logits + r * vocab;
    const std::int64_t target = targets[r];
    KTUNE_REQUIRE(target >= 0 && target < vocab, "target " + std::to_string(target) +
                                                     " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    T max = lr[0];
    for (std::int64_t c = 1; c < vocab; ++c) max = lr[c] > max ? lr[c] : max;
    T sum = 0;
    for (std::int64_t c = 0; c < vocab; ++c) sum += std::exp(lr[c] - max);
    lse[r] = max + std::log(sum);
    losses[r] = lse[r] - lr[target];
  }
}

template <class T>
void cross_entropy_backward(const T* logits, const std::int32_t* targets, const T* lse, T scale, T* dlogits,
                            std::int64_t rows, std::int64_t vocab) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* lr = logits + r * vocab;
    T* dr = dlogits + r * vocab;
    const T l = lse[r];
    const std::int64_t target = targets[r];
    KTUNE_REQUIRE(target >= 0 && target < vocab, "target " + std::to_string(target) +
                                                     " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    for (std::int64_t c = 0; c < vocab; ++c) dr[c] = scale * std::exp(lr[c] - l);
    dr[target] -= scale;
  }
}

template void cross_entropy_forward<float>(const float*, const std::int32_t*, float*, float*, std::int64_t,
                                           std::int64_t);
template void cross_entropy_forward<double>(const double*, const std::int32_t*, double*, double*, std::int64_t,
                                            std::int64_t);
template void cross_entropy_backward<float>(const float*, const std::int32_t*, const float*, float, float*,
                                            std::int64_t, std::int64_t);
template void cross_entropy_backward<double>(const double*, const std::int32_t*, const double*, double, double*,
                                             std::int64_t, std::int64_t);

}  // namespace ktune::templates::cross_entropy
