// Bayesian optimisation: a Gaussian-process model of log(time) over the
// config encoding (each parameter's domain position scaled to [0, 1]),
// Matérn-5/2 kernel with its length scale picked by marginal likelihood,
// expected improvement maximised over a candidate set (random unmeasured
// valid configs plus the one-parameter neighbours of the best ones). Failed
// configs enter the model at the worst observed value, so it learns to avoid
// their region. Model-guided: few evaluations, more arithmetic per step.
#pragma once
#include <unordered_set>

#include "search/sampling.hpp"
#include "search/strategy.hpp"

namespace ktune::search {

class BayesOpt final : public Strategy {
 public:
  struct Options {
    int initial = 0;         ///< random configs before the model; 0: 2 × dimensions, clamped to [8, 20]
    int candidates = 300;    ///< random candidates per step
    int top_neighbours = 3;  ///< neighbours of this many best configs join the candidates
    int max_train = 128;     ///< observations the model is fitted on (the best and the most recent)
  };
  explicit BayesOpt(const StrategyContext& context) : BayesOpt(context, Options{}) {}
  BayesOpt(const StrategyContext& context, Options options);
  std::optional<Config> next() override;
  void report(const Config& config, const Outcome& outcome) override;

 private:
  struct Observation {
    Point point;
    std::vector<double> x;
    double time;  ///< +inf for failures
  };
  std::vector<double> encode(const Point& p) const;
  std::optional<Point> random_unmeasured();
  std::optional<Point> propose();

  StrategyContext context_;
  Options options_;
  Rng rng_;
  std::vector<int> dims_;  ///< parameters with more than one value
  std::vector<Observation> observations_;
  std::unordered_set<std::uint64_t> seen_;
  double length_scale_ = 0.3;
};

}  // namespace ktune::search
