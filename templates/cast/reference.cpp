// The dtype casts (see reference.hpp).
#include "templates/cast/reference.hpp"

#include "templates/render.hpp"

namespace ktune::templates::cast {

void cast_to_bf16(const float* x, std::uint16_t* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = float_to_bf16_bits(x[i]);
}

void cast_to_f32(const std::uint16_t* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = bf16_bits_to_float(x[i]);
}

}  // namespace ktune::templates::cast
