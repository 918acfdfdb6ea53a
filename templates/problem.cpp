#include "templates/problem.hpp"

#include <fmt/format.h>

#include "base/error.hpp"

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

double tolerance_for(const std::string& dtype) {
  if (dtype == "f32") return 1e-5;
  if (dtype == "tf32") return 5e-4;
  if (dtype == "bf16" || dtype == "f16") return 1e-2;
  throw_error(ErrorKind::kInvalidInput, "no tolerance for dtype '" + dtype + "'; accepted: f32, tf32, bf16, f16");
}

}  // namespace ktune::templates
