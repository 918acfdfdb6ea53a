// The merge rule: how two measurements of the same key are reconciled when
// caches from several GPUs or hosts are combined.
#include <map>
#include <set>

#include "cache/store.hpp"

namespace ktune::cache {

bool better_than(const Entry& a, const Entry& b) {
  // A strict weak order (each test compares one quantity of the two), so which entry a merge keeps of several is
  // the same whatever their order. Below kSpreadRepetitions an interval measures nothing (one sample's is empty):
  // such an entry stays only where no entry was measured more.
  const bool a_spread = a.repetitions >= kSpreadRepetitions, b_spread = b.repetitions >= kSpreadRepetitions;
  if (a_spread != b_spread) return a_spread;
  // The interval's slow end: of disjoint intervals the faster entry's; within the noise, the tighter one's.
  if (a.p80_ms != b.p80_ms) return a.p80_ms < b.p80_ms;
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

MergeCount merge_entries(std::vector<Entry>& into, const std::vector<Entry>& incoming) {
  collapse_duplicates(into);
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < into.size(); ++i) index[into[i].key.identity()] = i;
  // The target's entry of each key the input holds as it was before (null: none), so duplicates within
  // `incoming` count once, by what the merge made of the key in the end.
  std::map<std::string, nlohmann::json> before;
  for (const Entry& e : incoming) {
    const std::string id = e.key.identity();
    const auto it = index.find(id);
    before.try_emplace(id, it == index.end() ? nlohmann::json() : to_json(into[it->second]));
    if (it == index.end()) {
      index[id] = into.size();
      into.push_back(e);
    } else if (better_than(e, into[it->second])) {
      Entry kept = e;
      keep_faster_pick(kept, into[it->second]);
      into[it->second] = std::move(kept);
    } else {
      keep_faster_pick(into[it->second], e);
    }
  }
  MergeCount count;
  const auto without_pick = [](nlohmann::json j) {
    j.erase("deterministic");
    return j;
  };
  for (const auto& [id, was] : before) {
    const nlohmann::json now = to_json(into[index.at(id)]);
    if (was.is_null()) ++count.added;
    else if (now == was) ++count.kept;
    else if (without_pick(now) == without_pick(was)) ++count.picks;
    else ++count.replaced;
  }
  return count;
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
    // Per where(), the entries this build can use first, then the newest date.
    const auto rank = [&](const Entry& e) { return std::make_pair(!options.usable || options.usable(e), e.date); };
    std::map<std::string, std::pair<bool, std::string>> best;  // where() → best rank
    for (const Entry& e : kept) {
      auto [it, fresh] = best.try_emplace(e.key.where(), rank(e));
      if (!fresh) it->second = std::max(it->second, rank(e));
    }
    std::map<std::string, bool> kept_best;  // one survivor per where(), even on equal ranks
    std::erase_if(kept, [&](const Entry& e) {
      if (!options.family.empty() && e.key.family != options.family) return false;  // another family's: untouched
      if (rank(e) != best[e.key.where()] || kept_best[e.key.where()]) return true;
      kept_best[e.key.where()] = true;
      return false;
    });
  }
  entries = std::move(kept);
  return before - entries.size();
}

}  // namespace ktune::cache
