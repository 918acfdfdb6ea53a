// The tuned cache as a run-time service: a cache file parsed once, answering
// "which config for this family, problem and device?" with exact, nearest or
// default and the reason, and returning warnings (stale entries) instead of
// printing them. The runtime and the benchmarks read caches only through it.
#pragma once
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "cache/store.hpp"

namespace ktune::cache {

/// An answer with the reason a person reads ("exact", "nearest (distance
/// 1.00, tuned for f32;numel=4096;tensors=1)", "default (no tuned entry)").
struct Answer {
  LookupResult result;
  std::string reason;
};

class TunedCache {
 public:
  /// An empty cache: every lookup answers the default.
  TunedCache() = default;
  explicit TunedCache(std::vector<Entry> entries, std::string origin = "");
  /// Parses `path` once. Throws kCache on a bad file (cache/SCHEMA.md); a
  /// missing file throws kInvalidInput naming it.
  static TunedCache read(const std::filesystem::path& path);

  /// Exact key, else the nearest tuned shape `accept` takes, else none
  /// (cache::lookup's rules).
  Answer lookup(const Key& query, const std::function<bool(const Entry&)>& accept = {}) const;

  /// Whether a problem without an exact entry takes the nearest tuned shape (the default) or the default.
  void set_nearest(bool allowed) { nearest_ = allowed; }
  bool nearest() const { return nearest_; }

  const std::vector<Entry>& entries() const { return entries_; }
  const std::string& origin() const { return origin_; }  ///< the file, or empty

 private:
  std::vector<Entry> entries_;
  std::string origin_;
  bool nearest_ = true;
};

}  // namespace ktune::cache
