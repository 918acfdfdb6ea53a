// The families' shared host helpers (family_helpers.hpp).
#include "templates/common/family_helpers.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "base/error.hpp"
#include "templates/render.hpp"

namespace ktune::templates {

bool is_bf16(const Problem& p) { return p.dtype == "bf16"; }
DType activation_dtype(const Problem& p) { return is_bf16(p) ? DType::kBF16 : DType::kF32; }
std::int64_t activation_bytes(const Problem& p) { return is_bf16(p) ? 2 : 4; }
const char* activation_type(const Problem& p) { return is_bf16(p) ? "kt::bf16" : "float"; }

unsigned grid_stride_blocks(std::int64_t blocks, std::int64_t blocks_per_sm, const DeviceLimits& device) {
  if (blocks_per_sm > 0) blocks = std::min(blocks, blocks_per_sm * device.sm_count);
  return static_cast<unsigned>(std::min<std::int64_t>(blocks, (1LL << 31) - 1));
}

std::optional<std::int64_t> checked_product(std::initializer_list<std::int64_t> factors) {
  std::int64_t product = 1;
  for (const std::int64_t f : factors)
    if (__builtin_mul_overflow(product, f, &product)) return std::nullopt;
  return product;
}

double mean_square(std::span<const double> x) {
  double sum = 0;
  for (const double v : x) sum += v * v;
  return x.empty() ? 0.0 : sum / static_cast<double>(x.size());
}

void require_elements_within(const std::string& family, const Problem& p, std::initializer_list<const char*> dims,
                             const std::string& what) {
  std::int64_t product = 1;
  bool overflows = false;
  std::vector<std::string> names, values;
  for (const char* d : dims) {
    overflows = overflows || __builtin_mul_overflow(product, p.dim(d), &product);
    names.emplace_back(d);
    values.push_back(std::to_string(p.dim(d)));
  }
  KTUNE_REQUIRE(!overflows && product <= kMaxTensorElements,
                fmt::format("{}: {} would hold {} = {} elements{}, more than {}, the most one tensor may (past any "
                            "device's memory)",
                            family, what, fmt::join(names, " * "), fmt::join(values, " * "),
                            overflows ? " (past int64)" : fmt::format(" = {}", product), kMaxTensorElementsText));
}

bool reject(std::string* why, std::string reason) {
  if (why) *why = std::move(reason);
  return false;
}

Config with(Config base, std::initializer_list<std::pair<const char*, std::int64_t>> changes) {
  for (const auto& [name, value] : changes) base.set(name, value);
  return base;
}

void require_aligned(const std::string& family, const char* buffer, std::uint64_t address, std::int64_t align,
                     const char* accesses) {
  KTUNE_REQUIRE(address % static_cast<std::uint64_t>(align) == 0,
                fmt::format("{}: buffer '{}' at {:#x} is not aligned to the {} bytes of {}", family, buffer, address,
                            align, accesses));
}

void require_addresses(const std::string& family, const std::vector<std::uint64_t>& addresses,
                       const std::vector<std::string>& names) {
  KTUNE_REQUIRE(addresses.size() == names.size(),
                fmt::format("{}: {} buffer addresses given, the workload has {} ({})", family, addresses.size(),
                            names.size(), fmt::join(names, ", ")));
}

namespace {
void require_f32_or_bf16(DType dtype) {
  KTUNE_REQUIRE(dtype == DType::kF32 || dtype == DType::kBF16,
                fmt::format("family buffers hold f32 or bf16 values, not {}", to_string(dtype)));
}

/// A buffer of `dtype` (f32 or bf16) holding `values`, rounded to the dtype.
HostBuffer values_buffer(std::string name, Role role, DType dtype, const std::vector<double>& values) {
  require_f32_or_bf16(dtype);
  if (dtype == DType::kBF16) {
    std::vector<std::uint16_t> bits(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) bits[i] = float_to_bf16_bits(static_cast<float>(values[i]));
    return make_buffer(std::move(name), role, dtype, bits);
  }
  return make_buffer(std::move(name), role, dtype, std::vector<float>(values.begin(), values.end()));
}

}  // namespace

std::vector<double> stored_as(DType dtype, const std::vector<float>& values) {
  require_f32_or_bf16(dtype);
  std::vector<double> out(values.size());
  for (std::size_t i = 0; i < values.size(); ++i)
    out[i] = dtype == DType::kBF16 ? bf16_bits_to_float(float_to_bf16_bits(values[i])) : values[i];
  return out;
}

HostBuffer input_buffer(std::string name, DType dtype, const std::vector<double>& values) {
  return values_buffer(std::move(name), Role::kInput, dtype, values);
}

HostBuffer output_buffer(std::string name, DType dtype, const std::vector<double>& values) {
  HostBuffer b = values_buffer(name, Role::kOutput, dtype, std::vector<double>(values.size()));
  b.expected = values_buffer(std::move(name), Role::kOutput, dtype, values).bytes;
  b.tolerance = tolerance_for(to_string(dtype));
  return b;
}

}  // namespace ktune::templates
