// Problems: a compute dtype and named dimensions, the key the cache and the
// session logs use for them, and element types of buffers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ktune::templates {

/// Element types of buffers and problems.
enum class DType { kF32, kBF16, kF16, kI32, kI64, kU8 };
const char* to_string(DType t);
DType parse_dtype(const std::string& s);  ///< "f32" | "bf16" | "f16" | ...; throws kInvalidInput
std::size_t size_of(DType t);
/// i32, i64 and u8: counts and indices, compared exactly.
bool is_integer(DType t);

/// One problem instance: a dtype and named dimensions. The key orders the
/// dimensions by name, so it is stable and human readable.
struct Problem {
  std::string dtype;
  std::map<std::string, std::int64_t> dims;

  std::int64_t dim(const std::string& name) const;  ///< throws kInvalidInput
  std::string key() const;                          ///< e.g. "f32;numel=16384;tensors=4"
  nlohmann::json to_json() const;
  static Problem from_json(const nlohmann::json& j);
  static Problem from_key(const std::string& key);  ///< the inverse of key(); throws kInvalidInput
  friend bool operator==(const Problem&, const Problem&) = default;
};

/// What a family's problems look like, read from its problem classes (which
/// cover every dtype and every dimension it takes): the dtypes, the
/// dimensions every class names (required) and those only some name (optional).
struct ProblemForm {
  std::vector<std::string> dtypes;
  std::vector<std::string> required;
  std::vector<std::string> optional;

  static ProblemForm of(const std::vector<Problem>& classes);
  /// "batch, causal, head_dim, heads, kv_heads (optional), seq"
  std::string dims_text() const;
};

/// The check every problem given from outside goes through first: throws
/// kInvalidInput when `problem` lacks a required dimension ("is missing") or
/// names one `form` does not know, naming `family`'s dimensions either way.
void require_dims(const std::string& family, const Problem& problem, const ProblemForm& form);

/// The tolerance DESIGN.md sets for a compute dtype.
double tolerance_for(const std::string& dtype);

}  // namespace ktune::templates
