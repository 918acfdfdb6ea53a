// Row-wise softmax forward and backward (see reference.hpp).
#include "templates/softmax/reference.hpp"

#include <cmath>

namespace ktune::templates::softmax {

template <class T>
void softmax_forward(const T* x, T* y, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    T max = xr[0];
    for (std::int64_t c = 1; c < cols; ++c) max = xr[c] > max ? xr[c] : max;
    T sum = 0;
    for (std::int64_t c = 0; c < cols; ++c) {
      yr[c] = std::exp(xr[c] - max);
      sum += yr[c];
    }
    const T inv = T(1) / sum;
    for (std::int64_t c = 0; c < cols; ++c) yr[c] *= inv;
  }
}

template <class T>
void softmax_backward(const T* y, const T* dy, T* dx, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* yr = y + r * cols;
    const T* dyr = dy + r * cols;
    T* dxr = dx + r * cols;
    T dot = 0;
    for (std::int64_t c = 0; c < cols; ++c) dot += dyr[c] * yr[c];
    for (std::int64_t c = 0; c < cols; ++c) dxr[c] = yr[c] * (dyr[c] - dot);
  }
}

template void softmax_forward<float>(const float*, float*, std::int64_t, std::int64_t);
template void softmax_forward<double>(const double*, double*, std::int64_t, std::int64_t);
template void softmax_backward<float>(const float*, const float*, float*, std::int64_t, std::int64_t);
template void softmax_backward<double>(const double*, const double*, double*, std::int64_t, std::int64_t);

}  // namespace ktune::templates::softmax
