// Problems: a compute dtype and named dimensions, the key the cache and the
// session logs use for them, and element types of buffers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace ktune::templates {

/// Element types of buffers and problems.
enum class DType { kF32, kBF16, kF16, kI32, kI64, kU8 };
const char* to_string(DType t);
DType parse_dtype(const std::string& s);  ///< "f32" | "bf16" | "f16" | ...; throws kInvalidInput
std::size_t size_of(DType t);

/// One problem instance: a dtype and named dimensions. The key orders the
/// dimensions by name, so it is stable and human readable.
struct Problem {
  std::string dtype;
  std::map<std::string, std::int64_t> dims;

  std::int64_t dim(const std::string& name) const;  ///< throws kInvalidInput
  std::string key() const;                          ///< e.g. "f32;numel=16384;tensors=4"
  nlohmann::json to_json() const;
  static Problem from_json(const nlohmann::json& j);
  friend bool operator==(const Problem&, const Problem&) = default;
};

/// The tolerance DESIGN.md sets for a compute dtype.
double tolerance_for(const std::string& dtype);

}  // namespace ktune::templates
