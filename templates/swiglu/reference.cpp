// SwiGLU gate forward and backward (see reference.hpp).
#include "templates/swiglu/reference.hpp"

#include <cmath>

namespace ktune::templates::swiglu {

template <class T>
void swiglu_forward(const T* a, const T* b, T* h, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const T sig = T(1) / (T(1) + std::exp(-a[i]));
    h[i] = a[i] * sig * b[i];
  }
}

template <class T>
void swiglu_backward(const T* a, const T* b, const T* dh, T* da, T* db, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const T x = a[i];
    const T g = dh[i];
    const T sig = T(1) / (T(1) + std::exp(-x));
    const T silu = x * sig;
    db[i] = g * silu;
    da[i] = g * b[i] * sig * (T(1) + x * (T(1) - sig));
  }
}

template void swiglu_forward<float>(const float*, const float*, float*, std::int64_t);
template void swiglu_forward<double>(const double*, const double*, double*, std::int64_t);
template void swiglu_backward<float>(const float*, const float*, const float*, float*, float*, std::int64_t);
template void swiglu_backward<double>(const double*, const double*, const double*, double*, double*, std::int64_t);

}  // namespace ktune::templates::swiglu
