#include "templates/family.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <limits>

#include "base/error.hpp"
#include "base/hash.hpp"
#include "templates/embedded.hpp"
#include "templates/render.hpp"

namespace ktune::templates {

const char* to_string(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
  }
  return "?";
}

DType parse_dtype(const std::string& s) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kU8})
    if (s == to_string(t)) return t;
  throw_error(ErrorKind::kInvalidInput, "unknown dtype '" + s + "'; accepted: f32, bf16, f16, i32, i64, u8");
}

std::size_t size_of(DType t) {
  switch (t) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kBF16: case DType::kF16: return 2;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
  }
  return 1;
}

DeviceLimits DeviceLimits::for_arch(const std::string& arch) {
  DeviceLimits d;
  d.arch = arch;
  if (arch == "sm_80") {  // A100
    d.sm = 80, d.sm_count = 108, d.max_smem_per_block = 163 * 1024, d.smem_per_sm = 164 * 1024;
    d.l2_bytes = 40LL << 20;
  } else if (arch == "sm_86") {  // RTX 30xx, A10, A40
    d.sm = 86, d.sm_count = 84, d.max_smem_per_block = 99 * 1024, d.smem_per_sm = 100 * 1024;
    d.max_threads_per_sm = 1536, d.max_blocks_per_sm = 16, d.l2_bytes = 6LL << 20;
  } else if (arch == "sm_89") {  // L4, L40, RTX 40xx
    d.sm = 89, d.sm_count = 142, d.max_smem_per_block = 99 * 1024, d.smem_per_sm = 100 * 1024;
    d.max_threads_per_sm = 1536, d.max_blocks_per_sm = 24, d.l2_bytes = 96LL << 20;
  } else if (arch == "sm_90" || arch == "sm_90a") {  // H100 SXM
    d.sm = 90;
  } else {
    throw_error(ErrorKind::kInvalidInput,
                fmt::format("unknown architecture '{}'; accepted: {}", arch, fmt::join(known_archs(), ", ")));
  }
  return d;
}

std::vector<std::string> DeviceLimits::known_archs() { return {"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"}; }

nlohmann::json DeviceLimits::to_json() const {
  return {{"name", name}, {"driver_version", driver_version}, {"arch", arch}, {"sm", sm}, {"sm_count", sm_count},
          {"max_threads_per_block", max_threads_per_block}, {"max_static_smem", max_static_smem},
          {"max_smem_per_block", max_smem_per_block}, {"smem_per_sm", smem_per_sm}, {"regs_per_sm", regs_per_sm},
          {"max_regs_per_thread", max_regs_per_thread}, {"max_threads_per_sm", max_threads_per_sm},
          {"max_blocks_per_sm", max_blocks_per_sm}, {"l2_bytes", l2_bytes}};
}

DeviceLimits DeviceLimits::from_json(const nlohmann::json& j) {
  DeviceLimits d;
  d.name = j.at("name").get<std::string>();
  d.driver_version = j.at("driver_version").get<int>();
  d.arch = j.at("arch").get<std::string>();
  d.sm = j.at("sm").get<int>();
  d.sm_count = j.at("sm_count").get<int>();
  d.max_threads_per_block = j.at("max_threads_per_block").get<int>();
  d.max_static_smem = j.at("max_static_smem").get<int>();
  d.max_smem_per_block = j.at("max_smem_per_block").get<int>();
  d.smem_per_sm = j.at("smem_per_sm").get<int>();
  d.regs_per_sm = j.at("regs_per_sm").get<int>();
  d.max_regs_per_thread = j.at("max_regs_per_thread").get<int>();
  d.max_threads_per_sm = j.at("max_threads_per_sm").get<int>();
  d.max_blocks_per_sm = j.at("max_blocks_per_sm").get<int>();
  d.l2_bytes = j.at("l2_bytes").get<long long>();
  return d;
}

std::int64_t Problem::dim(const std::string& name) const {
  const auto it = dims.find(name);
  KTUNE_REQUIRE(it != dims.end(), "problem " + key() + " has no dimension '" + name + "'");
  return it->second;
}

std::string Problem::key() const {
  std::string k = dtype;
  for (const auto& [name, v] : dims) k += fmt::format(";{}={}", name, v);
  return k;
}

nlohmann::json Problem::to_json() const {
  nlohmann::json j = {{"dtype", dtype}, {"dims", nlohmann::json::object()}};
  for (const auto& [name, v] : dims) j["dims"][name] = v;
  return j;
}

Problem Problem::from_json(const nlohmann::json& j) {
  KTUNE_REQUIRE(j.is_object() && j.contains("dtype") && j["dtype"].is_string(),
                "a problem is {\"dtype\": \"f32\", \"dims\": {\"name\": integer, ...}}, got " + j.dump());
  Problem p;
  p.dtype = j["dtype"].get<std::string>();
  if (j.contains("dims")) {
    KTUNE_REQUIRE(j["dims"].is_object(), "problem dims must be an object of integers, got " + j["dims"].dump());
    for (const auto& [name, v] : j["dims"].items()) {
      KTUNE_REQUIRE(v.is_number_integer(), "problem dimension '" + name + "' must be an integer, got " + v.dump());
      p.dims[name] = v.get<std::int64_t>();
    }
  }
  return p;
}

namespace {
template <class Convert>
double rel_l2(std::size_t n, Convert at_pair) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto [g, e] = at_pair(i);
    if (!std::isfinite(g) || !std::isfinite(e)) return std::numeric_limits<double>::infinity();
    num += (g - e) * (g - e);
    den += e * e;
  }
  if (den == 0) return num == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(num / den);
}

template <class T>
T load(const std::vector<std::byte>& v, std::size_t i) {
  T x;
  std::memcpy(&x, v.data() + i * sizeof(T), sizeof(T));
  return x;
}
}  // namespace

double value_at(DType t, const std::vector<std::byte>& bytes, std::size_t i) {
  switch (t) {
    case DType::kF32: return load<float>(bytes, i);
    case DType::kBF16: return bf16_bits_to_float(load<std::uint16_t>(bytes, i));
    case DType::kF16: return f16_bits_to_float(load<std::uint16_t>(bytes, i));
    case DType::kI32: return load<std::int32_t>(bytes, i);
    case DType::kI64: return static_cast<double>(load<std::int64_t>(bytes, i));
    case DType::kU8: return load<std::uint8_t>(bytes, i);
  }
  return 0;
}

double relative_l2(DType t, const std::vector<std::byte>& got, const std::vector<std::byte>& expected) {
  if (got.size() != expected.size()) return std::numeric_limits<double>::infinity();
  if (t != DType::kF32 && t != DType::kBF16 && t != DType::kF16 && t != DType::kI32)
    return got == expected ? 0.0 : std::numeric_limits<double>::infinity();
  return rel_l2(got.size() / size_of(t), [&](std::size_t i) {
    return std::pair<double, double>(value_at(t, got, i), value_at(t, expected, i));
  });
}

double tolerance_for(const std::string& dtype) {
  if (dtype == "f32") return 1e-5;
  if (dtype == "tf32") return 5e-4;
  if (dtype == "bf16" || dtype == "f16") return 1e-2;
  throw_error(ErrorKind::kInvalidInput, "no tolerance for dtype '" + dtype + "'; accepted: f32, tf32, bf16, f16");
}

std::string Family::source_hash() const {
  Hasher h;
  h.add(name());
  for (const auto& f : source_files()) h.add(f).add(expand_includes(f));
  return h.hex();
}

}  // namespace ktune::templates
