// Tuned-cache vocabulary: the key an entry is stored under (named fields,
// never positional), the measured value, and their JSON form. The schema is
// documented in cache/SCHEMA.md. This layer knows no kernel family types:
// the tuner fills these structs with plain strings and numbers.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/stamp.hpp"

namespace ktune::cache {

/// Schema version written into every cache file; files with a higher one
/// are refused (kCache), never rewritten.
inline constexpr int kSchemaVersion = 1;
/// Value of the file's "format" field.
inline constexpr const char* kFormatName = "ktune-tuned-cache";

/// Where a tuned result applies. Two entries with equal keys describe the
/// same thing; `dims` carries the problem's shape for nearest-shape lookup
/// and is not part of the identity (`problem_key` already encodes it).
struct Key {
  std::string family;          ///< kernel family, e.g. "attention_fwd"
  std::string source_hash;     ///< hash of the family's template source
  std::string problem_key;     ///< e.g. "f32;numel=16384;tensors=4"
  std::string dtype;           ///< e.g. "bf16"
  std::string arch;            ///< e.g. "sm_90"
  std::string gpu_name;        ///< e.g. "NVIDIA H100 80GB HBM3"
  std::string nvrtc_version;   ///< e.g. "13.0"
  std::string driver_version;  ///< e.g. "13000" (cuDriverGetVersion)
  std::map<std::string, std::int64_t> dims;  ///< shape dimensions, e.g. {"numel": 16384}
  /// Fields of the key this ktune does not know (a newer one wrote them), kept
  /// as they were so that rewriting the file loses nothing; not part of the
  /// identity (a field that changes which problem a key names comes with a new
  /// schema version, which this ktune refuses).
  nlohmann::json extra = nlohmann::json::object();

  /// Identity without the validity stamp (source hash, NVRTC, driver): the
  /// fields that say *which* problem on *which* GPU.
  std::string where() const;
  /// Full identity: where() plus the stamp.
  std::string identity() const;
  /// Same family, problem, dtype, arch and GPU but another source hash,
  /// NVRTC or driver version: a stale entry for this query.
  bool stale_for(const Key& query) const;
};

/// The fastest config a tuning session measured among those that sum in a
/// fixed order (templates::Family::deterministic), kept beside a winner that
/// does not: what a deterministic run takes instead of the winner.
struct DeterministicPick {
  nlohmann::json config = nlohmann::json::object();  ///< parameter name → value
  double time_ms = 0;  ///< its median, timed beside the winner where the session timed finalists again
};

/// A tuned result.
struct Entry {
  Key key;
  nlohmann::json config = nlohmann::json::object();  ///< parameter name → value
  double time_ms = 0;      ///< median of the winner's repetitions
  double p20_ms = 0;
  double p80_ms = 0;
  double spread = 0;       ///< (p80 - p20) / median
  std::int64_t evaluations = 0;  ///< configs measured by the search that found it
  std::int64_t repetitions = 0;  ///< timed repetitions behind time_ms
  std::string date;        ///< ISO 8601 UTC; filled by put() when empty
  std::string ktune_version;  ///< filled by put() when empty
  /// Where `config` does not sum in a fixed order and the session measured a
  /// config that does; absent otherwise (and in entries older ktunes wrote).
  std::optional<DeterministicPick> deterministic;
  /// Fields of the entry this ktune does not know, kept as they were (see Key::extra).
  nlohmann::json extra = nlohmann::json::object();
};

nlohmann::json to_json(const Key& key);
nlohmann::json to_json(const Entry& entry);
/// Throws kCache with `where` (the file) in the message on a malformed entry:
/// a missing or mistyped field, a dimension outside 0..INT64_MAX, a negative
/// or non-finite measurement, p20_ms above p80_ms, negative counts, no
/// repetition behind the time, a date that is not ISO 8601 UTC.
/// The message names the entry by its `index` in the file's "entries" and,
/// where they can be read, its family and problem.
Entry entry_from_json(const nlohmann::json& j, const std::string& where, std::size_t index);

/// The value of an integer JSON number when it fits std::int64_t exactly;
/// nullopt for anything else (a float, a string, an unsigned above
/// INT64_MAX, which a plain get<std::int64_t>() would wrap).
std::optional<std::int64_t> exact_int64(const nlohmann::json& j);


}  // namespace ktune::cache
