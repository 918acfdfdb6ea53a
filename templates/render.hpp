// Helpers that families use to render: the expanded template text followed by
// instantiations of the requested kernels, so the text is self-contained.
#pragma once
#include <random>
#include <string>
#include <vector>

#include "templates/family.hpp"

namespace ktune::templates {

/// Renders `template_file` (a path under templates/) for `kernels` (NVRTC name
/// expressions). NVRTC instantiates through the name expressions; nvcc and the
/// emulation backend through the block at the end of the text. The text
/// depends only on the template and the kernels, so configs that differ in
/// run-time parameters alone share one compiled binary. Every template's
/// kernels start with kt::wait_previous_kernel(), so the result says so
/// (Rendered::waits_previous_kernel).
Rendered render_template(const std::string& template_file, std::vector<std::string> kernels,
                         const std::string& family_name);
/// The same for source text from elsewhere (a kernel spec's files): `origin`
/// says where it came from in the first line. Its kernels are not known to
/// wait for the previous kernel: they are always launched after it ends.
Rendered render_text(const std::string& text, std::vector<std::string> kernels, const std::string& family_name,
                     const std::string& origin);

/// A buffer holding `values`, with `expected` left empty.
template <class T>
HostBuffer make_buffer(std::string name, Role role, DType dtype, const std::vector<T>& values) {
  HostBuffer b;
  b.name = std::move(name);
  b.role = role;
  b.dtype = dtype;
  b.bytes.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(b.bytes.data(), values.data(), b.bytes.size());
  return b;
}

/// Copies `values` into `buffer.expected`.
template <class T>
void set_expected(HostBuffer& buffer, const std::vector<T>& values) {
  buffer.expected.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(buffer.expected.data(), values.data(), buffer.expected.size());
}

/// `n` floats uniform in [lo, hi) from `rng`.
std::vector<float> random_floats(std::mt19937_64& rng, std::size_t n, float lo, float hi);

/// Round-to-nearest-even fp32 → bf16 bits, and back.
std::uint16_t float_to_bf16_bits(float x);
float bf16_bits_to_float(std::uint16_t bits);
/// IEEE binary16 bits → fp32 (exact).
float f16_bits_to_float(std::uint16_t bits);
/// Round-to-nearest-even fp32 → IEEE binary16 bits (subnormals kept,
/// overflow to infinity, NaN stays a quiet NaN).
std::uint16_t float_to_f16_bits(float x);

}  // namespace ktune::templates
