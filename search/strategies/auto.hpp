// The default strategy: model-guided early, evolutionary late, with
// restarts. Bayesian optimisation (bayes_opt.hpp) proposes the first
// configs, where a model of the space finds the fast region in few
// evaluations; then a genetic algorithm (genetic.hpp), bred from every config
// measured so far, takes over, since recombining good configs reaches optima
// that a smooth model ranks below what it already knows (an isolated fast
// config whose neighbours are all slow). When the genetic algorithm has gone
// `patience` evaluations without a new best, it starts afresh from random
// configs, as annealing restarts a walk: some spaces hold their optimum in a
// narrow region away from the one the archive converged on. Needs no
// settings per space; the settings below were chosen on all eight shared
// recorded spaces together (bench/results/replay.md).
#pragma once
#include <cmath>
#include <cstdint>
#include <memory>
#include <unordered_set>
#include <utility>
#include <vector>

#include "search/strategies/bayes_opt.hpp"
#include "search/strategies/genetic.hpp"
#include "search/strategy.hpp"

namespace ktune::search {

class Auto final : public Strategy {
 public:
  struct Options {
    int model_evals = 40;  ///< evaluations the model proposes: more finds the region surer, later
    int patience = 100;    ///< evaluations without a new best before a fresh genetic algorithm (0: never)
    /// Time-aware search (a config that costs more to compile and measure is
    /// proposed later): the model's expected improvement per predicted
    /// cost^this (BayesOpt::Options::cost_weight), and the genetic algorithm
    /// keeps the cheapest of this many times its children (Genetic::Options::
    /// cost_pool). Off: with 1 and 2 (the strategy `auto_timed`) the recorded
    /// time to 95 % of the optimum grew on the spaces measured
    /// (bench/results/replay.md).
    double cost_weight = 0;
    int cost_pool = 1;
  };
  explicit Auto(const StrategyContext& context) : Auto(context, Options{}) {}
  Auto(const StrategyContext& context, Options options);
  std::optional<Config> next() override;
  void report(const Config& config, const Outcome& outcome) override;
  /// The proposing strategy's own hint: the model's best candidates, then the
  /// genetic algorithm's generation in flight.
  std::vector<Config> upcoming(std::size_t n) const override;

 private:
  /// Starts a genetic algorithm: bred from everything measured, or from random configs.
  void start_genetic(bool from_measured);

  StrategyContext context_;
  Options options_;
  std::unique_ptr<BayesOpt> model_;  ///< until the hand-over
  std::unique_ptr<Genetic> genetic_;  ///< after it
  std::vector<std::pair<Config, Outcome>> measured_;  ///< each config once, in order
  std::unordered_set<std::uint64_t> seen_;            ///< space indices of measured_
  double best_ms_ = INFINITY;
  int since_improvement_ = 0;
  std::uint64_t starts_ = 0;  ///< genetic algorithms started, for their seeds
};

}  // namespace ktune::search
