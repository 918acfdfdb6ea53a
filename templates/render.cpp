#include "templates/render.hpp"

#include <bit>

#include "templates/embedded.hpp"

namespace ktune::templates {

Rendered render_template(const std::string& template_file, std::vector<std::string> kernels,
                         const std::string& family_name) {
  Rendered r;
  r.source = "// " + family_name + ": rendered by ktune from templates/" + template_file + "\n";
  r.source += expand_includes(template_file);
  r.source += "\n// Instantiations for nvcc and the emulation backend; NVRTC uses name expressions.\n";
  r.source += "#if !defined(__CUDACC_RTC__)\nnamespace kt_instantiate {\n";
  for (std::size_t i = 0; i < kernels.size(); ++i)
    r.source += "inline void* const kernel_" + std::to_string(i) + " = reinterpret_cast<void*>(&" + kernels[i] +
                ");\n";
  r.source += "}  // namespace kt_instantiate\n#endif\n";
  r.kernels = std::move(kernels);
  return r;
}

std::vector<float> random_floats(std::mt19937_64& rng, std::size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::uint16_t float_to_bf16_bits(float x) {
  const auto bits = std::bit_cast<std::uint32_t>(x);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu))  // NaN stays a quiet NaN
    return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

float bf16_bits_to_float(std::uint16_t bits) { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }

float f16_bits_to_float(std::uint16_t bits) {
  const std::uint32_t sign = (bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));  // Inf, NaN
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float v = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

}  // namespace ktune::templates
