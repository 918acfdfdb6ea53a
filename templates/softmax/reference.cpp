// Row-wise softmax forward and backward (see reference.hpp).
#include "templates/softmax/reference.hpp"

#include <cmath>

namespace ktune::templates::softmax {

template <class T>
void softmax_forward(const T* x, T* y, std::int64_t rows, std::int64_t cols, T scale, bool causal) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const std::int64_t n = causal ? r % cols + 1 : cols;  // columns this row sees
    T max = scale * xr[0];
    for (std::int64_t c = 1; c < n; ++c) max = scale * xr[c] > max ? scale * xr[c] : max;
    T sum = 0;
    for (std::int64_t c = 0; c < n; ++c) {
      yr[c] = std::exp(scale * xr[c] - max);
      sum += yr[c];
    }
    const T inv = T(1) / sum;
    for (std::int64_t c = 0; c < n; ++c) yr[c] *= inv;
    for (std::int64_t c = n; c < cols; ++c) yr[c] = 0;
  }
}

template <class T>
void softmax_forward(const T* x, T* y, std::int64_t rows, std::int64_t cols) {
  softmax_forward(x, y, rows, cols, T(1), false);
}

template <class T>
void softmax_backward(const T* y, const T* dy, T* dx, std::int64_t rows, std::int64_t cols, T scale, bool causal) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* yr = y + r * cols;
    const T* dyr = dy + r * cols;
    T* dxr = dx + r * cols;
    const std::int64_t n = causal ? r % cols + 1 : cols;
    T dot = 0;
    for (std::int64_t c = 0; c < n; ++c) dot += dyr[c] * yr[c];
    for (std::int64_t c = 0; c < n; ++c) dxr[c] = scale * yr[c] * (dyr[c] - dot);
    for (std::int64_t c = n; c < cols; ++c) dxr[c] = 0;
  }
}

template <class T>
void softmax_backward(const T* y, const T* dy, T* dx, std::int64_t rows, std::int64_t cols) {
  softmax_backward(y, dy, dx, rows, cols, T(1), false);
}

#define KTUNE_INSTANTIATE(T)                                                                                  \
  template void softmax_forward<T>(const T*, T*, std::int64_t, std::int64_t);                                 \
  template void softmax_forward<T>(const T*, T*, std::int64_t, std::int64_t, T, bool);                        \
  template void softmax_backward<T>(const T*, const T*, T*, std::int64_t, std::int64_t);                      \
  template void softmax_backward<T>(const T*, const T*, T*, std::int64_t, std::int64_t, T, bool);
KTUNE_INSTANTIATE(float)
KTUNE_INSTANTIATE(double)
#undef KTUNE_INSTANTIATE

}  // namespace ktune::templates::softmax
