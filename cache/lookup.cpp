// Lookup: exact key, else the nearest tuned shape (log2 distance) of the same
// family, dtype and stamp on the same arch, measured on a GPU where the query
// is for one (else on the emulation); stale entries give warnings.
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <set>

#include "cache/store.hpp"

namespace ktune::cache {

std::optional<double> shape_distance(const std::map<std::string, std::int64_t>& a,
                                     const std::map<std::string, std::int64_t>& b) {
  if (a.size() != b.size()) return std::nullopt;
  double sum = 0;
  for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib) {
    if (ia->first != ib->first) return std::nullopt;
    // log2(1 + x) keeps zero-valued dimensions (e.g. a "causal" flag) finite.
    const double d = std::log2(1.0 + std::fabs(static_cast<double>(ia->second))) -
                     std::log2(1.0 + std::fabs(static_cast<double>(ib->second)));
    sum += d * d;
  }
  return std::sqrt(sum);
}

namespace {
// Whether an entry's dims are its problem key's dimensions ("f32;numel=8;tensors=4": numel 8, tensors 4), as
// make_key writes them; an edited entry may say one shape in its key and another in its dims.
bool dims_agree(const Key& key) {
  std::string keyed;
  for (const auto& [name, value] : key.dims) keyed += fmt::format(";{}={}", name, value);
  const auto first = key.problem_key.find(';');
  return (first == std::string::npos ? std::string() : key.problem_key.substr(first)) == keyed;
}
}  // namespace

LookupResult lookup(const std::vector<Entry>& entries, const Key& query, const LookupOptions& options) {
  LookupResult result;
  const std::string id = query.identity();
  std::set<std::string> warned;
  auto warn_stale = [&](const Entry& e) {
    std::vector<std::string> what;
    if (e.key.source_hash != query.source_hash)
      what.push_back(fmt::format("source hash {} (now {})", e.key.source_hash, query.source_hash));
    if (e.key.nvrtc_version != query.nvrtc_version)
      what.push_back(fmt::format("NVRTC {} (now {})", e.key.nvrtc_version, query.nvrtc_version));
    if (e.key.driver_version != query.driver_version)
      what.push_back(fmt::format("driver {} (now {})", e.key.driver_version, query.driver_version));
    std::string line = fmt::format("ignoring stale cache entry for {} {} on {} ({}): tuned with", e.key.family,
                                   e.key.problem_key, e.key.gpu_name, e.key.arch);
    for (std::size_t i = 0; i < what.size(); ++i) line += (i ? ", " : " ") + what[i];
    if (warned.insert(line).second) result.warnings.push_back(line);
  };

  // Duplicates of the key (a file written by hand or by an older ktune) give the entry a merge would keep.
  for (const Entry& e : entries)
    if (e.key.identity() == id && (!result.entry || better_than(e, *result.entry))) result.entry = e;
  if (result.entry) {
    result.match = Match::kExact;
    return result;
  }
  // Another kernel source or NVRTC compiles other code: such an entry is never used. Another driver runs the same
  // code, and its entries stand in as nearest ones, after this driver's of the same distance.
  const auto compiled_alike = [&](const Entry& e) {
    return e.key.source_hash == query.source_hash && e.key.nvrtc_version == query.nvrtc_version;
  };
  for (const Entry& e : entries)
    if (e.key.stale_for(query) && (!compiled_alike(e) || !options.allow_nearest)) warn_stale(e);
  if (!options.allow_nearest) return result;

  const Entry* best = nullptr;
  double best_distance = std::numeric_limits<double>::infinity();
  auto rank = [&](const Entry& e) {
    return std::make_tuple(e.key.driver_version != query.driver_version, e.key.gpu_name != query.gpu_name,
                           e.key.problem_key);
  };
  // The host emulation (no driver: version 0) times the host, not a GPU: its winners never stand in for a GPU's,
  // nor a GPU's for its.
  const auto emulated = [](const Key& k) { return k.driver_version == "0"; };
  for (const Entry& e : entries) {
    if (e.key.family != query.family || e.key.dtype != query.dtype || e.key.arch != query.arch) continue;
    if (!compiled_alike(e)) continue;  // stale for this query: never a fallback either
    if (emulated(e.key) != emulated(query)) continue;
    const auto d = shape_distance(e.key.dims, query.dims);
    if (!d) continue;
    if (!dims_agree(e.key)) {  // which shape it was tuned for is not known: no nearest shape
      const std::string line = fmt::format("passing over the cache entry for {} {} as a nearest shape: its dims {} "
                                           "are not its problem key's (was the file edited?)",
                                           e.key.family, e.key.problem_key, nlohmann::json(e.key.dims).dump());
      if (warned.insert(line).second) result.warnings.push_back(line);
      continue;
    }
    if (options.accept && !options.accept(e)) continue;
    if (best == nullptr || *d < best_distance || (*d == best_distance && rank(e) < rank(*best))) {
      best = &e;
      best_distance = *d;
    }
  }
  if (best != nullptr) {
    result.match = Match::kNearest;
    result.entry = *best;
    result.distance = best_distance;
  }
  return result;
}

}  // namespace ktune::cache
