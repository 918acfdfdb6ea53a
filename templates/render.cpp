#include "templates/render.hpp"

#include <bit>
#include <cmath>

#include "templates/embedded.hpp"

namespace ktune::templates {

Rendered render_template(const std::string& template_file, std::vector<std::string> kernels,
                         const std::string& family_name) {
  Rendered r =
      render_text(expand_includes(template_file), std::move(kernels), family_name, "templates/" + template_file);
  r.waits_previous_kernel = true;  // every template's kernel starts with kt::wait_previous_kernel() (tested)
  return r;
}

Rendered render_text(const std::string& text, std::vector<std::string> kernels, const std::string& family_name,
                     const std::string& origin) {
  Rendered r;
  r.source = "// " + family_name + ": rendered by ktune from " + origin + "\n";
  r.source += text;
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

std::uint16_t float_to_f16_bits(float x) {
  const auto bits = std::bit_cast<std::uint32_t>(x);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u)  // Inf, or NaN made quiet
    return static_cast<std::uint16_t>(sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x200u : 0u));
  if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // 65520 and up round to Inf
  if (magnitude < 0x38800000u) {  // below 2^-14: a multiple of 2^-24, rounded to nearest even
    const float units = std::bit_cast<float>(magnitude) * 0x1p24f;  // exact: the scale is a power of two
    return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(std::nearbyint(units)));
  }
  std::uint32_t rebased = magnitude - ((127u - 15u) << 23);  // exponent bias 127 -> 15
  rebased += 0xfffu + ((rebased >> 13) & 1u);                 // round the 13 dropped bits to nearest even
  return static_cast<std::uint16_t>(sign | (rebased >> 13));
}

}  // namespace ktune::templates
