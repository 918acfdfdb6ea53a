// RoPE forward and backward (see reference.hpp).
#include "templates/rope/reference.hpp"

#include <cmath>

#include "base/error.hpp"

namespace ktune::templates::rope {

template <class T>
void rope_tables(std::int64_t seq, std::int64_t head_dim, double theta, T* cos_table, T* sin_table) {
  KTUNE_REQUIRE(head_dim % 2 == 0, "RoPE needs an even head dimension, got " + std::to_string(head_dim));
  const std::int64_t half = head_dim / 2;
  for (std::int64_t p = 0; p < seq; ++p) {
    for (std::int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) * std::pow(theta, -2.0 * static_cast<double>(i) / head_dim);
      cos_table[p * half + i] = static_cast<T>(std::cos(angle));
      sin_table[p * half + i] = static_cast<T>(std::sin(angle));
    }
  }
}

namespace {

// sign = +1 rotates by the angle, -1 by its opposite.
template <class T>
void rotate(const T* x, T* y, const T* cos_table, const T* sin_table, std::int64_t seq, std::int64_t heads,
            std::int64_t head_dim, std::int64_t token_begin, std::int64_t token_end, T sign) {
  const std::int64_t half = head_dim / 2;
  for (std::int64_t t = token_begin; t < token_end; ++t) {
    const T* c = cos_table + (t % seq) * half;
    const T* s = sin_table + (t % seq) * half;
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t base = (t * heads + h) * head_dim;
      for (std::int64_t i = 0; i < half; ++i) {
        const T x0 = x[base + 2 * i];
        const T x1 = x[base + 2 * i + 1];
        const T si = sign * s[i];
        y[base + 2 * i] = x0 * c[i] - x1 * si;
        y[base + 2 * i + 1] = x0 * si + x1 * c[i];
      }
    }
  }
}

}  // namespace

template <class T>
void rope_forward(const T* x, T* y, const T* cos_table, const T* sin_table, std::int64_t seq, std::int64_t heads,
                  std::int64_t head_dim, std::int64_t token_begin, std::int64_t token_end) {
  rotate<T>(x, y, cos_table, sin_table, seq, heads, head_dim, token_begin, token_end, T(1));
}

template <class T>
void rope_backward(const T* dy, T* dx, const T* cos_table, const T* sin_table, std::int64_t seq, std::int64_t heads,
                   std::int64_t head_dim, std::int64_t token_begin, std::int64_t token_end) {
  rotate<T>(dy, dx, cos_table, sin_table, seq, heads, head_dim, token_begin, token_end, T(-1));
}

#define KTUNE_INSTANTIATE(T)                                                                                       \
  template void rope_tables<T>(std::int64_t, std::int64_t, double, T*, T*);                                        \
  template void rope_forward<T>(const T*, T*, const T*, const T*, std::int64_t, std::int64_t, std::int64_t,        \
                                std::int64_t, std::int64_t);                                                        \
  template void rope_backward<T>(const T*, T*, const T*, const T*, std::int64_t, std::int64_t, std::int64_t,       \
                                 std::int64_t, std::int64_t);
KTUNE_INSTANTIATE(float)
KTUNE_INSTANTIATE(double)
#undef KTUNE_INSTANTIATE

}  // namespace ktune::templates::rope
