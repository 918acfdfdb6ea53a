// Bayesian optimisation, after Willemsen et al. (2021) and Kernel Tuner's
// bayes_opt: a Gaussian-process model (search/gaussian_process.hpp) of
// log(time) over the config encoding (each parameter's domain position scaled
// to [0, 1]), expected improvement maximised over the unmeasured valid
// configs. The candidates are every valid config when the space is small
// enough to list, otherwise a random sample of valid configs that grows by
// the neighbours of each new best. A space-filling random design starts it;
// the length scales (one per parameter) and the noise are refitted by
// marginal likelihood as the observations grow; a failed config enters the
// model at the slowest time measured, so the model learns to avoid its
// region. Model-guided: few evaluations, more arithmetic per step (about a
// millisecond per evaluation on a 4,000-config space).
#pragma once
#include <unordered_map>

#include "search/cost_model.hpp"
#include "search/gaussian_process.hpp"
#include "search/sampling.hpp"
#include "search/strategy.hpp"

namespace ktune::search {

class BayesOpt final : public Strategy {
 public:
  struct Options {
    int initial = 0;                        ///< design points before the model; 0: dimensions + 2, at least 5
    int design_draws = 10;                  ///< each design point is the farthest of this many random draws
    std::uint64_t enumerate_limit = 1 << 17;  ///< list every valid config of spaces up to this size
    int candidates = 4096;                  ///< sampled candidates on larger spaces
    double refit_growth = 1.5;              ///< refit hyperparameters when observations grow by this factor
    int fit_max = 128;                      ///< observations the hyperparameters are fitted on
    int max_model = 1024;                   ///< observations in the model (the best and the most recent)
    /// Candidates with mean - this × sd above the best sleep until the next
    /// refit; while every one sleeps, a neighbour of the best configs (or a
    /// design point) is proposed, so only the budget ends a search.
    double dormant_sd = 4.0;
    double xi = 0.05;  ///< improvement sought beyond the best (log time, so 5 %): more exploration, less greed
    /// After this many evaluations without a new best, every other proposal is
    /// a child of two of the best measured configs (uniform crossover, repaired
    /// within one step): a smooth model ranks an isolated optimum below the
    /// region it knows, so it stalls there; recombination often reaches it.
    int stall = 30;
    /// After this many, the proposals take turns: a child, an unmeasured
    /// neighbour (one parameter changed) of the best measured config that
    /// has one, the model's pick. Neighbours taken from the best config down
    /// reach an isolated optimum while the budget lasts, where recombination
    /// may not; sooner, they take turns from the model where it would still
    /// find the way (0: never).
    int neighbour_stall = 60;
    int parents = 16;  ///< the children's parents come from this many best measured configs
    /// Time-aware acquisition: expected improvement divided by the predicted
    /// cost (cost_model.hpp) to this power; 0: cost is ignored.
    double cost_weight = 0;
  };
  explicit BayesOpt(const StrategyContext& context) : BayesOpt(context, Options{}) {}
  BayesOpt(const StrategyContext& context, Options options);
  std::optional<Config> next() override;
  void report(const Config& config, const Outcome& outcome) override;
  /// Once the model exists: the candidates of highest expected improvement.
  std::vector<Config> upcoming(std::size_t n) const override;

 private:
  struct Observation {
    std::vector<double> x;
    double time;  ///< +inf for failures
    Point point;
  };
  std::vector<double> encode(const Point& p) const;
  void add_candidate(const Point& p);
  std::optional<Point> design_point();
  void refit();
  std::optional<Point> propose();
  bool stalled() const {
    return options_.stall > 0 && since_improvement_ >= static_cast<std::size_t>(options_.stall);
  }
  enum class Turn { kModel, kChild, kNeighbour };
  Turn turn() const;  ///< who makes the next proposal
  /// An unmeasured valid neighbour of the best measured config that has one.
  std::optional<Point> neighbour(Rng& rng) const;
  /// An unmeasured child of two of the best measured configs.
  std::optional<Point> child(Rng& rng) const;
  /// The active candidate of highest acquisition; none when every unmeasured candidate sleeps.
  std::optional<std::size_t> best_candidate() const;
  /// The acquisition of an active candidate: expected improvement, per predicted cost when time-aware.
  double acquisition(std::size_t id) const;

  StrategyContext context_;
  Options options_;
  Rng rng_;
  std::vector<int> dims_;  ///< parameters with more than one value
  bool enumerated_ = false;
  GaussianProcess gp_;
  CostModel cost_;
  std::vector<Point> pool_;                          ///< candidate id → point
  std::unordered_map<std::uint64_t, std::size_t> pool_id_;  ///< index → candidate id
  std::size_t unmeasured_ = 0;                       ///< active candidates
  std::vector<Observation> observations_;
  std::unordered_map<std::uint64_t, double> seen_;  ///< index → time
  std::size_t fitted_at_ = 0;  ///< observations at the last refit; 0 before the model exists
  double worst_log_ = -INFINITY;  ///< slowest success in the model (log ms)
  double best_log_ = INFINITY;
  std::size_t since_improvement_ = 0;  ///< evaluations since the last new best
  std::size_t stalled_steps_ = 0;      ///< proposals made while stalled
};

}  // namespace ktune::search
