// The search driver loop: next → is_valid → evaluate → report.
#include "search/search.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

namespace ktune::search {
namespace {
// A strategy that keeps proposing only configs already seen has converged;
// after this many in a row the search ends rather than spin.
constexpr std::uint64_t kMaxRepeatsInARow = 100000;

std::uint64_t key_of(const Space& space, const Config& c, bool* ok) {
  const auto i = space.index_of(c);
  *ok = i.has_value();
  return i.value_or(0);
}
}  // namespace

SearchResult run_search(Evaluator& evaluator, Strategy& strategy, const StopCondition& stop,
                        const SearchCallbacks& callbacks, const std::vector<Config>& first) {
  SearchResult result;
  SearchState& state = result.state;
  const Space& space = evaluator.space();
  std::unordered_map<std::uint64_t, Outcome> seen;
  std::uint64_t repeats_in_a_row = 0;
  const std::string budget = stop.describe();
  const auto report_progress = [&] {
    if (!callbacks.on_progress) return;
    // The count and the cost the budget counts (a resumed log's results too).
    const SearchState counted = stop.spent(state);
    Progress p;
    p.state = &counted;
    p.best = result.best ? &*result.best : nullptr;
    p.budget = budget;
    p.valid_points = evaluator.valid_points();
    // The budget's share spent, or the space's share covered where that is
    // more (a small space ends the search before its budget does): of its
    // valid points where they are known, else of all, refused ones counted.
    const double covered =
        p.valid_points > 0 ? static_cast<double>(counted.evaluations) / static_cast<double>(p.valid_points)
                           : static_cast<double>(counted.evaluations + result.rejected) /
                                 static_cast<double>(std::max<std::uint64_t>(space.size(), 1));
    const double frac = std::max(stop.progress(state), std::min(1.0, covered));
    if (frac > 0 && frac < 1) p.eta_s = counted.cost_s * (1 - frac) / frac;
    if (frac >= 1) p.eta_s = 0;
    callbacks.on_progress(p);
  };
  // Evaluates one config the search has not seen, records its outcome and
  // reports it to the strategy and the progress callback.
  const auto evaluate = [&](const Config& config, std::uint64_t index) {
    Outcome outcome = evaluator.evaluate(config);
    if (!outcome.ok) outcome.time_ms = std::numeric_limits<double>::infinity();
    seen.emplace(index, outcome);
    ++state.evaluations;
    state.cost_s += outcome.cost_s;
    if (!outcome.ok) ++state.failures;
    if (outcome.ok && outcome.time_ms < state.best_ms) {
      state.best_ms = outcome.time_ms;
      state.since_improvement = 0;
      result.best = config;
      result.best_outcome = outcome;
    } else {
      ++state.since_improvement;
    }
    if (callbacks.on_record) callbacks.on_record(Record{state.evaluations - 1, config, outcome});
    strategy.report(config, outcome);
    report_progress();
  };
  for (const Config& c : first) {
    if (stop.done(state)) break;
    bool in_space = false;
    const std::uint64_t index = key_of(space, c, &in_space);
    if (!in_space || seen.count(index)) continue;
    evaluate(c, index);
  }

  while (true) {
    if (stop.done(state)) {
      result.stopped_by = "budget: " + budget;
      break;
    }
    std::optional<Config> next = strategy.next();
    if (!next) {
      // A strategy that stops proposing before the valid points are covered has converged, not exhausted them;
      // one that covered them all ran out of space, whatever the budget left.
      const std::uint64_t valid = evaluator.valid_points();
      result.stopped_by = valid > state.evaluations
                              ? fmt::format("strategy converged ({} of {} valid configs measured)", state.evaluations,
                                            valid)
                          : valid > 0 ? fmt::format("space exhausted (all {} valid config{} measured)", valid,
                                                    valid == 1 ? "" : "s")
                                      : "strategy exhausted";
      break;
    }
    bool in_space = false;
    const std::uint64_t index = key_of(space, *next, &in_space);
    std::string why;
    if (!in_space || !evaluator.is_valid(*next, &why)) {
      ++result.rejected;
      Outcome refused;
      refused.failure = in_space ? "invalid: " + why : "invalid: not a point of the space";
      strategy.report(*next, refused);
      if (++repeats_in_a_row >= kMaxRepeatsInARow) {
        result.stopped_by = "no progress";
        break;
      }
      continue;
    }
    if (const auto it = seen.find(index); it != seen.end()) {
      ++result.repeats;
      strategy.report(*next, it->second);
      if (++repeats_in_a_row >= kMaxRepeatsInARow) {
        result.stopped_by = "no progress";
        break;
      }
      continue;
    }
    repeats_in_a_row = 0;
    evaluate(*next, index);
  }
  return result;
}

}  // namespace ktune::search
