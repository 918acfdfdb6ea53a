// The default strategy: model-guided early, evolutionary late, with local
// walks when evolution has converged. Bayesian optimisation (bayes_opt.hpp)
// proposes the first configs, where a model of the space finds the fast
// region in few evaluations; then the adjacent neighbours of the model's
// best few configs are measured (a sweep), and a genetic algorithm
// (genetic.hpp), bred from every config measured so far, takes over, since
// recombining good configs reaches optima that a smooth model ranks below
// what it already knows (an isolated fast config whose neighbours are all
// slow). The sweep is there for what recombination rarely makes: a config
// one step from a good one of another region (a switch that every good
// config of the first region found shares), which the archive, soon full of
// that first region, would not breed. A genetic algorithm
// keeps recombining through long stretches without a new best, and often
// wins them; but once its archive has converged (its children are no longer
// new) and it has gone `walk_after` evaluations without a new best (one at
// least `progress` faster than the last), the optimum may lie in a region
// the archive never held. Then an iterated local search (local_search.hpp:
// hill climbing over adjacent values, perturbations, random restarts)
// proposes instead, until it finds a new best (which the genetic algorithm
// breeds from next) or `walk_length` proposals pass. Both are time-aware
// (a cost model of what was measured, cost_model.hpp): a child predicted to
// cost well above the rest to compile and measure waits for a later
// generation, and the walk tries the costlier half of its neighbours last.
// Needs no settings per space; the settings below were chosen on all eight
// shared recorded spaces together (bench/results/replay.md).
#pragma once
#include <cmath>
#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_set>
#include <utility>
#include <vector>

#include "search/cost_model.hpp"
#include "search/strategies/bayes_opt.hpp"
#include "search/strategies/genetic.hpp"
#include "search/strategies/local_search.hpp"
#include "search/strategy.hpp"

namespace ktune::search {

class Auto final : public Strategy {
 public:
  struct Options {
    int model_evals = 40;  ///< evaluations the model proposes: more finds the region surer, later
    /// The best configs of the model's whose unmeasured adjacent neighbours
    /// (one parameter one step away) are measured at the hand-over: more
    /// finds a neighbouring region surer, at a dozen or so evaluations each.
    int sweep = 3;
    /// Evaluations without a new best, with the genetic algorithm converged,
    /// before the local walk proposes (0: never): lower leaves the genetic
    /// algorithm less time to recombine its way to an isolated optimum.
    int walk_after = 60;
    int walk_length = 200;  ///< walk proposals without a new best before the genetic algorithm goes on
    /// A new best counts as progress (it restarts the count toward the walk,
    /// and ends a walk) only when it is at least this fraction faster than
    /// the best before it. A genetic algorithm converged on a wide basin
    /// keeps finding configs a fraction of a percent faster inside it (on
    /// convolution W6600: 0.826, 0.832, 0.835, 0.836 of the optimum), each
    /// of which would put the walk off again; gains that small are within
    /// the noise of a real GPU measurement anyway.
    double progress = 0.01;
    /// Time-aware search (a config that costs more to compile and measure is
    /// proposed later). The genetic algorithm breeds this many times its
    /// generation and proposes a child predicted to cost well above the rest
    /// only when too few cheaper ones were bred (Genetic::Options::cost_pool,
    /// cost_cut): on the recorded spaces the median time to 95 % of the
    /// optimum fell (convolution W6600 2.5 % -> 2.0 % of the brute-force
    /// time, A100 3.3 % -> 2.7 %) and no median evaluation count rose past
    /// Kernel Tuner's best (bench/results/replay.md).
    int cost_pool = 2;
    /// The model's expected improvement per predicted cost^this
    /// (BayesOpt::Options::cost_weight). Off: at 1 and 0.5 both the
    /// evaluations and the recorded time to 95 % of the optimum grew when
    /// measured beside the genetic algorithm's earlier pool rule (keep the
    /// cheapest half). Beside the present one (cost_pool above), the
    /// strategy `auto_timed` (this at 1) is ahead on convolution A100: to
    /// 95 % of the optimum, a median 137 evaluations and 2.1 % of the
    /// brute-force time against auto's 150 and 2.7 % (184 and 182 of 200
    /// runs reach it; seeds 1-200: `ktune replay --dataset
    /// ../shared/replay/convolution_milo_A100.json.gz --strategy
    /// auto,auto_timed --runs 200`); the other spaces were not scored again.
    double cost_weight = 0;
  };
  explicit Auto(const StrategyContext& context) : Auto(context, Options{}) {}
  Auto(const StrategyContext& context, Options options);
  std::optional<Config> next() override;
  void report(const Config& config, const Outcome& outcome) override;
  /// The proposing strategy's own hint: the model's best candidates, the
  /// sweep's rest, the walk's next neighbours, or the genetic algorithm's
  /// generation in flight.
  std::vector<Config> upcoming(std::size_t n) const override;

 private:
  /// Hands over from the model to a genetic algorithm bred from everything
  /// measured, after the sweep of the best configs' neighbourhoods.
  void start_genetic();
  bool measured(const Point& p) const;

  StrategyContext context_;
  Options options_;
  std::unique_ptr<BayesOpt> model_;    ///< until the hand-over
  std::unique_ptr<Genetic> genetic_;   ///< after it; told of every config measured
  std::unique_ptr<LocalSearch> walk_;  ///< after it; told of its own proposals only
  std::deque<Point> sweep_;            ///< proposed before the genetic algorithm's first, in order
  bool walking_ = false;               ///< the walk proposes
  bool walk_in_flight_ = false;        ///< the config being measured is the walk's
  int walked_ = 0;                     ///< walk proposals since walking_ was set
  std::vector<std::pair<Config, Outcome>> measured_;  ///< each config once, in order
  std::unordered_set<std::uint64_t> seen_;            ///< space indices of measured_
  CostModel cost_;                                    ///< of measured_: the walk tries the costlier neighbours last
  double best_ms_ = INFINITY;
  int since_improvement_ = 0;  ///< evaluations since the last new best that counted as progress
};

}  // namespace ktune::search
