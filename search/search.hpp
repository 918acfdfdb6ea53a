// The search driver: asks a strategy for configs, checks the constraint,
// evaluates, reports back, until a stop condition holds or the strategy runs
// out. Every evaluation is handed to a callback as it arrives (the tuner
// appends it to its session log), and progress (best, counts, ETA) to another.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/space.hpp"
#include "search/evaluator.hpp"
#include "search/stop.hpp"
#include "search/strategy.hpp"

namespace ktune::search {

/// One evaluation, in the order it happened.
struct Record {
  std::uint64_t sequence = 0;  ///< 0, 1, 2, ... per search
  Config config;
  Outcome outcome;
};

/// A progress report, sent after every evaluation.
struct Progress {
  const SearchState* state = nullptr;
  const Config* best = nullptr;  ///< null until the first success
  double eta_s = -1;             ///< estimated cost still to spend; < 0 when unknown
  std::string budget;            ///< the stop condition, described
  std::uint64_t valid_points = 0;  ///< the space's valid points, where the evaluator knows them (else 0)
};

struct SearchCallbacks {
  /// Every (config, outcome) as it arrives. An exception thrown here ends the search.
  std::function<void(const Record&)> on_record;
  std::function<void(const Progress&)> on_progress;
};

/// What a search found.
struct SearchResult {
  std::optional<Config> best;  ///< nullopt when nothing succeeded
  Outcome best_outcome;
  SearchState state;
  std::uint64_t repeats = 0;   ///< configs the strategy proposed again (answered from memory)
  std::uint64_t rejected = 0;  ///< configs the strategy proposed that is_valid refused
  /// "budget: ...", "strategy converged (N of V valid configs measured)" or "space exhausted (all V valid configs
  /// measured)" (where the evaluator knows V), "strategy exhausted" (where it does not), "no progress"
  std::string stopped_by;
};

/// Runs `strategy` against `evaluator` until `stop` holds or the strategy
/// returns nullopt. A config proposed twice is not re-evaluated: the strategy
/// gets the first outcome again and no budget is spent. A config failing
/// is_valid is reported to the strategy as a failure and not evaluated. A
/// failed evaluation (ok == false) counts as +inf and the search goes on.
/// Ties for the best keep the earlier config.
/// `first` (e.g. the family's default, the reference every speed-up is
/// measured against, and its candidates) are evaluated before the strategy is
/// asked for anything, as given (no is_valid check), within the budget, and
/// reported to the strategy, which starts from what they measured; a strategy
/// that proposes one later gets its outcome from memory.
SearchResult run_search(Evaluator& evaluator, Strategy& strategy, const StopCondition& stop,
                        const SearchCallbacks& callbacks = {}, const std::vector<Config>& first = {});

}  // namespace ktune::search
