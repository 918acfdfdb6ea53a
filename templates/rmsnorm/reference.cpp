// RMSNorm forward and backward (see reference.hpp).
#include "templates/rmsnorm/reference.hpp"

#include <cmath>

namespace ktune::templates::rmsnorm {

template <class T>
void rmsnorm_forward(const T* x, const T* w, T* y, T* rstd, std::int64_t rows, std::int64_t dim, T eps) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * dim;
    T* yr = y + r * dim;
    T sum_sq = 0;
    for (std::int64_t c = 0; c < dim; ++c) sum_sq += xr[c] * xr[c];
    const T s = T(1) / std::sqrt(sum_sq / static_cast<T>(dim) + eps);
    rstd[r] = s;
    for (std::int64_t c = 0; c < dim; ++c) yr[c] = xr[c] * s * w[c];
  }
}

template <class T>
void rmsnorm_backward(const T* x, const T* w, const T* rstd, const T* dy, T* dx, T* dw, std::int64_t rows,
                      std::int64_t dim) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * dim;
    const T* dyr = dy + r * dim;
    T* dxr = dx + r * dim;
    const T s = rstd[r];
    T dot = 0;  // sum(w*dy*x)
    for (std::int64_t c = 0; c < dim; ++c) dot += w[c] * dyr[c] * xr[c];
    const T k = s * s * dot / static_cast<T>(dim);
    for (std::int64_t c = 0; c < dim; ++c) {
      dxr[c] = s * (w[c] * dyr[c] - xr[c] * k);
      dw[c] += dyr[c] * xr[c] * s;
    }
  }
}

template void rmsnorm_forward<float>(const float*, const float*, float*, float*, std::int64_t, std::int64_t, float);
template void rmsnorm_forward<double>(const double*, const double*, double*, double*, std::int64_t, std::int64_t,
                                      double);
template void rmsnorm_backward<float>(const float*, const float*, const float*, const float*, float*, float*,
                                      std::int64_t, std::int64_t);
template void rmsnorm_backward<double>(const double*, const double*, const double*, const double*, double*, double*,
                                       std::int64_t, std::int64_t);

}  // namespace ktune::templates::rmsnorm
