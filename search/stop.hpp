// Stop conditions, separate from strategies (STYLE.md habit 7, as KTT's
// StopCondition): an evaluation budget, a time budget (the sum of each
// evaluation's cost_s, so a replayed search is charged what the recorded one
// cost), a plateau, and any-of combinations.
#pragma once
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace ktune::search {

/// What a search has done so far; stop conditions read only this.
struct SearchState {
  std::uint64_t evaluations = 0;  ///< configs evaluated (failures included, repeats not)
  std::uint64_t failures = 0;     ///< evaluations with ok == false
  double cost_s = 0;              ///< sum of Outcome::cost_s
  double best_ms = std::numeric_limits<double>::infinity();
  std::uint64_t since_improvement = 0;  ///< evaluations since best_ms last improved
};

class StopCondition {
 public:
  virtual ~StopCondition() = default;
  virtual bool done(const SearchState& state) const = 0;
  /// Fraction of the budget spent, in [0, 1]; for the ETA. 0 when unknown.
  virtual double progress(const SearchState& state) const = 0;
  /// What the budget counts as done: the search's state, or more where the
  /// budget also counts work the search did not do (a resumed log's results).
  virtual SearchState spent(const SearchState& state) const { return state; }
  /// One line, e.g. "100 evaluations".
  virtual std::string describe() const = 0;
};

/// Stops after `max` evaluations.
class EvaluationBudget final : public StopCondition {
 public:
  explicit EvaluationBudget(std::uint64_t max) : max_(max) {}
  bool done(const SearchState& s) const override { return s.evaluations >= max_; }
  double progress(const SearchState& s) const override;
  std::string describe() const override;

 private:
  std::uint64_t max_;
};

/// Stops once the evaluations' summed cost reaches `seconds`.
class TimeBudget final : public StopCondition {
 public:
  explicit TimeBudget(double seconds) : seconds_(seconds) {}
  bool done(const SearchState& s) const override { return s.cost_s >= seconds_; }
  double progress(const SearchState& s) const override;
  std::string describe() const override;

 private:
  double seconds_;
};

/// Stops after `patience` evaluations without a new best.
class Plateau final : public StopCondition {
 public:
  explicit Plateau(std::uint64_t patience) : patience_(patience) {}
  bool done(const SearchState& s) const override { return s.since_improvement >= patience_; }
  double progress(const SearchState& s) const override { return 0; }
  std::string describe() const override;

 private:
  std::uint64_t patience_;
};

/// Stops when any part does; progress is the largest part's.
class AnyOf final : public StopCondition {
 public:
  explicit AnyOf(std::vector<std::unique_ptr<StopCondition>> parts) : parts_(std::move(parts)) {}
  bool done(const SearchState& s) const override;
  double progress(const SearchState& s) const override;
  std::string describe() const override;

 private:
  std::vector<std::unique_ptr<StopCondition>> parts_;
};

/// Never stops (the strategy runs out instead, e.g. exhaustive).
class Unbounded final : public StopCondition {
 public:
  bool done(const SearchState&) const override { return false; }
  double progress(const SearchState&) const override { return 0; }
  std::string describe() const override { return "no budget"; }
};

/// Builds a stop condition from budget words: "200" or "200evals" (evaluations),
/// "90s" / "15m" / "2h" (time), "plateau:50" (patience); several joined by
/// '+' stop at the first reached. Throws kInvalidInput on anything else.
std::unique_ptr<StopCondition> parse_budget(const std::string& text);

}  // namespace ktune::search
