// CPU reference of the dtype casts: the single implementation of their
// rounding, used by the kernel checks and by a cpu backend that keeps bf16
// copies. fp32 -> bf16 rounds to the nearest even (NaN stays a quiet NaN);
// bf16 -> fp32 is exact.
#pragma once
#include <cstdint>

namespace ktune::templates::cast {

/// y[i] = bf16(x[i]), round to nearest even; x (n,) fp32, y (n,) bf16 bits.
void cast_to_bf16(const float* x, std::uint16_t* y, std::int64_t n);

/// y[i] = float(x[i]) (exact); x (n,) bf16 bits, y (n,) fp32.
void cast_to_f32(const std::uint16_t* x, float* y, std::int64_t n);

}  // namespace ktune::templates::cast
