// Simulated annealing, after Kernel Tuner's simulated_annealing: a walk over
// one-parameter neighbours that accepts a slower config with probability
// exp(-relative slowdown / T), T cooling geometrically, restarting from a
// random valid config when T falls below T_min or the neighbourhood is spent.
#pragma once
#include <unordered_map>

#include "search/sampling.hpp"
#include "search/strategy.hpp"

namespace ktune::search {

class Annealing final : public Strategy {
 public:
  struct Options {
    double t_start = 0.1;   ///< accepts a 10 % slowdown with probability 1/e at the start
    double t_min = 0.0001;  ///< restart below this
    /// Cooling per evaluation: 0.95 runs a walk for about 135 evaluations
    /// before a restart, so a 400-evaluation search tries three starting
    /// regions rather than one (0.98: about 340 per walk).
    double alpha = 0.95;
  };
  explicit Annealing(const StrategyContext& context) : Annealing(context, Options{}) {}
  Annealing(const StrategyContext& context, Options options);
  std::optional<Config> next() override;
  void report(const Config& config, const Outcome& outcome) override;
  /// The next proposal exactly, then the other unmeasured neighbours of the
  /// current config (the walk's next steps, whichever it accepts).
  std::vector<Config> upcoming(std::size_t n) const override;

 private:
  std::optional<Point> restart();
  std::optional<Point> unmeasured_neighbour(const Point& from);

  StrategyContext context_;
  Options options_;
  Rng rng_;
  std::optional<Point> current_;
  double current_time_ = 0;
  double temperature_;
  std::unordered_map<std::uint64_t, double> seen_;
};

}  // namespace ktune::search
