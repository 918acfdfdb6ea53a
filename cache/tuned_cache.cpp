#include "cache/tuned_cache.hpp"

#include <fmt/format.h>

#include "base/error.hpp"

namespace ktune::cache {

TunedCache::TunedCache(std::vector<Entry> entries, std::string origin)
    : entries_(std::move(entries)), origin_(std::move(origin)) {}

TunedCache TunedCache::read(const std::filesystem::path& path) {
  std::error_code ec;
  KTUNE_REQUIRE(std::filesystem::exists(path, ec), "tuned cache " + path.string() + " does not exist");
  return TunedCache(CacheFile(path).load(), path.string());
}

Answer TunedCache::lookup(const Key& query, const std::function<bool(const Entry&)>& accept) const {
  LookupOptions options;
  options.accept = accept;
  options.allow_nearest = nearest_;
  Answer a{cache::lookup(entries_, query, options), ""};
  switch (a.result.match) {
    case Match::kExact: a.reason = "exact"; break;
    case Match::kNearest:
      // Tuned on another GPU of the arch, or under another driver, it says which.
      a.reason = fmt::format("nearest (distance {:.2f}, tuned for {}{}{})", a.result.distance,
                             a.result.entry->key.problem_key,
                             a.result.entry->key.gpu_name == query.gpu_name
                                 ? ""
                                 : " on " + a.result.entry->key.gpu_name,
                             a.result.entry->key.driver_version == query.driver_version
                                 ? ""
                                 : fmt::format(" under driver {} (now {})", a.result.entry->key.driver_version,
                                               query.driver_version));
      break;
    case Match::kNone:
      // An entry stale for the query (another kernel source, NVRTC or driver) says why it went unused.
      if (entries_.empty()) a.reason = "default (no tuned cache)";
      else if (a.result.warnings.empty())
        a.reason = nearest_ ? "default (no usable tuned entry)" : "default (no exact entry; nearest shapes not taken)";
      else a.reason = fmt::format("default (no usable tuned entry: {})", a.result.warnings.front());
      break;
  }
  return a;
}

}  // namespace ktune::cache
