// Scoring a strategy on a replayed space: many seeded runs, and per budget
// the distribution of the fraction of the optimum reached
// (optimum time / best time found), plus how many evaluations each run needed
// to reach a target fraction. `ktune replay` prints this.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "search/replay.hpp"
#include "search/stop.hpp"

namespace ktune::search {

/// A budget: evaluations, seconds of recorded evaluation cost, or a stop
/// condition as `ktune tune --budget` takes it (a plateau, or several joined
/// by '+'), which a run ends at as a tuning session would.
struct ReplayBudget {
  bool is_time = false;
  double amount = 0;  ///< evaluations, or seconds
  std::shared_ptr<const StopCondition> stop;  ///< set for a plateau or a '+' list (is_time and amount unused)
  std::string label;  ///< as the user wrote it
};
/// Parses "100" (evaluations, a whole number as parse_budget takes it),
/// "600s" / "10m" (recorded time), "10%" (a share of `brute_force_s`, the
/// recorded time of the whole space), or a stop condition with "plateau:N"
/// or '+' in it (e.g. "plateau:150+10%", parse_budget's words, N% allowed);
/// throws kInvalidInput.
ReplayBudget parse_replay_budget(const std::string& text, double brute_force_s = 0);

struct ReplayStudyOptions {
  std::string strategy = "random";
  std::vector<ReplayBudget> budgets;
  int runs = 50;
  std::uint64_t seed = 1;  ///< run r uses seed + r
  double target = 0.95;    ///< fraction of the optimum for evaluations-to-target
  std::function<void(int done)> on_run;  ///< after each run, with how many are done: progress for a caller
};

/// Quartiles over runs, and a 95 % confidence interval of the median.
struct Quartiles {
  double p25 = 0, median = 0, p75 = 0;
  /// The distribution-free interval of the median (order statistics): the
  /// values of ranks l and n + 1 - l (1-based) of the n sorted, l the
  /// largest whose binomial tail P(Bin(n, 1/2) < l) is at most 2.5 %, so it
  /// holds the true median with at least 95 % probability whatever the
  /// distribution (+inf where a run never reached what is counted). NaN
  /// below 6 runs, too few for one (5 give 93.75 % at most).
  double median_lo = NAN, median_hi = NAN;
};

struct ReplayBudgetResult {
  ReplayBudget budget;
  Quartiles fraction;  ///< fraction of the optimum reached within the budget
  /// Where a stop condition ended the runs (budget.stop only): evaluations,
  /// and recorded seconds spent.
  Quartiles stopped_evals, stopped_s;
};

struct ReplayStudyResult {
  std::string strategy;
  std::string device;
  double optimum_ms = 0;
  std::vector<ReplayBudgetResult> budgets;
  /// A run reached the target when it did within one of the budgets (its
  /// fraction of the optimum in that budget's row is at least the target):
  /// evaluations until it first did (+inf for a run that did not).
  Quartiles evals_to_target;
  /// Recorded evaluation time (s) until a run first reached the target, by
  /// the same rule (+inf for a run that did not): what a real session would
  /// have paid to get there.
  Quartiles seconds_to_target;
  int runs_reaching_target = 0;  ///< the runs with a finite evals_to_target (and seconds_to_target)
  /// Each run's evaluations and recorded seconds to the target, in the order
  /// of the runs (seed, seed + 1, ...): what the quartiles summarise, for
  /// statistics of one's own.
  std::vector<double> evals_to_target_runs, seconds_to_target_runs;
  int runs = 0;
  double wall_s = 0;  ///< host time the study took
  /// Search overhead: CPU time the strategy spent per proposal (next() and
  /// report() of one evaluation; upcoming() is not called), mean and largest
  /// over every run, and the largest setup (the constructor) of one run.
  double proposal_ms_mean = 0, proposal_ms_max = 0, setup_ms_max = 0;
};

ReplayStudyResult run_replay_study(ReplayEvaluator& evaluator, const ReplayStudyOptions& options);

/// Quartiles of values (+inf allowed); linear interpolation; with the
/// median's confidence interval.
Quartiles quartiles(std::vector<double> values);
/// The 1-based rank l of the lower end of the median's 95 % interval over n
/// values (the upper is n + 1 - l): the largest l >= 1 with P(Bin(n, 1/2)
/// <= l - 1) <= 0.025; 0 where n is too small for any.
std::size_t median_interval_rank(std::size_t n);

}  // namespace ktune::search
