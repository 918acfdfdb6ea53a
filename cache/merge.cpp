// The merge rule: how two measurements of the same key are reconciled when
// caches from several GPUs or hosts are combined.
#include <map>
#include <set>

#include "cache/store.hpp"

namespace ktune::cache {

bool better_than(const Entry& a, const Entry& b) {
  const bool disjoint = a.p80_ms < b.p20_ms || b.p80_ms < a.p20_ms;
  if (disjoint) return a.time_ms < b.time_ms;
  // Below kSpreadRepetitions a spread measures nothing (one sample's is 0).
  const bool a_spread = a.repetitions >= kSpreadRepetitions, b_spread = b.repetitions >= kSpreadRepetitions;
  if (a_spread != b_spread) return a_spread;
  if (a.spread != b.spread) return a.spread < b.spread;
  if (a.repetitions != b.repetitions) return a.repetitions > b.repetitions;
  if (a.evaluations != b.evaluations) return a.evaluations > b.evaluations;
  if (a.date != b.date) return a.date > b.date;
  return a.config.dump() < b.config.dump();
}

bool keep_faster_pick(Entry& kept, const Entry& other) {
  if (!other.deterministic) return false;
  if (kept.deterministic && kept.deterministic->time_ms <= other.deterministic->time_ms) return false;
  kept.deterministic = other.deterministic;
  return true;
}

std::size_t collapse_duplicates(std::vector<Entry>& entries) {
  std::map<std::string, std::size_t> index;  // identity -> position in `kept`
  std::vector<Entry> kept;
  for (Entry& e : entries) {
    const auto [it, fresh] = index.try_emplace(e.key.identity(), kept.size());
    if (fresh) {
      kept.push_back(std::move(e));
    } else if (better_than(e, kept[it->second])) {
      keep_faster_pick(e, kept[it->second]);
      kept[it->second] = std::move(e);
    } else {
      keep_faster_pick(kept[it->second], e);
    }
  }
  const std::size_t removed = entries.size() - kept.size();
  entries = std::move(kept);
  return removed;
}

std::size_t merge_entries(std::vector<Entry>& into, const std::vector<Entry>& incoming) {
  collapse_duplicates(into);
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < into.size(); ++i) index[into[i].key.identity()] = i;
  std::set<std::string> changed;  // keys, so duplicates within `incoming` count once
  for (const Entry& e : incoming) {
    const std::string id = e.key.identity();
    const auto it = index.find(id);
    if (it == index.end()) {
      index[id] = into.size();
      into.push_back(e);
      changed.insert(id);
    } else if (better_than(e, into[it->second])) {
      Entry kept = e;
      keep_faster_pick(kept, into[it->second]);
      into[it->second] = std::move(kept);
      changed.insert(id);
    } else if (keep_faster_pick(into[it->second], e)) {
      changed.insert(id);
    }
  }
  return changed.size();
}

std::size_t prune_entries(std::vector<Entry>& entries, const PruneOptions& options) {
  const std::size_t before = entries.size();
  // First the version filters, then, among the entries they keep, the newest
  // of each where(): an entry the filters drop supersedes nothing.
  std::vector<Entry> kept;
  for (const Entry& e : entries) {
    const bool of_family = options.family.empty() || e.key.family == options.family;
    auto differs = [&](const std::string& want, const std::string& have) { return !want.empty() && want != have; };
    if (of_family && (differs(options.source_hash, e.key.source_hash) ||
                      // An entry that compiled nothing (a gemm entry) has no NVRTC to differ.
                      (!e.key.nvrtc_version.empty() && differs(options.nvrtc_version, e.key.nvrtc_version)) ||
                      differs(options.driver_version, e.key.driver_version)))
      continue;
    kept.push_back(e);
  }
  if (options.superseded) {
    std::map<std::string, std::string> newest;  // where() → newest date
    for (const Entry& e : kept) {
      std::string& d = newest[e.key.where()];
      d = std::max(d, e.date);
    }
    std::map<std::string, bool> kept_newest;  // one survivor per where(), even on equal dates
    std::erase_if(kept, [&](const Entry& e) {
      if (!options.family.empty() && e.key.family != options.family) return false;  // another family's: untouched
      if (e.date != newest[e.key.where()] || kept_newest[e.key.where()]) return true;
      kept_newest[e.key.where()] = true;
      return false;
    });
  }
  entries = std::move(kept);
  return before - entries.size();
}

}  // namespace ktune::cache
