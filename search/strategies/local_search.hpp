// Greedy iterated local search, after Kernel Tuner's greedy_ils: first-
// improvement hill climbing over one-parameter neighbours in a random order;
// at a local optimum, a random walk of a few steps from the best local
// optimum starts the next climb; after several perturbations without a
// better optimum, a random restart.
#pragma once
#include <unordered_set>
#include <vector>

#include "search/cost_model.hpp"
#include "search/sampling.hpp"
#include "search/strategy.hpp"

namespace ktune::search {

class LocalSearch final : public Strategy {
 public:
  struct Options {
    bool adjacent_only = false;  ///< neighbours: only the next/previous value of a parameter (else any value)
    int perturbation = 3;        ///< random-walk steps from the home optimum
    int restart_after = 5;       ///< perturbations without a better optimum before a random restart
    /// Time-aware climbing: when set, the neighbours this model predicts to
    /// cost more than `cost_cut` times their median are tried after the
    /// others (set_apart_costly). The model is the caller's, and outlives
    /// the search. Every neighbour is still tried before the climb moves on,
    /// so the order is all this changes: the costlier half last (1.0)
    /// reached 95 % of the optimum sooner on convolution W6600 than only the
    /// clearly costlier last (1.2) (bench/results/replay.md).
    const CostModel* cost = nullptr;
    double cost_cut = 1.0;
  };
  explicit LocalSearch(const StrategyContext& context) : LocalSearch(context, Options{}) {}
  LocalSearch(const StrategyContext& context, Options options);
  std::optional<Config> next() override;
  void report(const Config& config, const Outcome& outcome) override;
  /// The unmeasured neighbours of the current point, in the order next() takes them.
  std::vector<Config> upcoming(std::size_t n) const override;

 private:
  void load_neighbours();
  std::optional<Point> start_point();
  bool unseen(const Point& p) const { return !seen_.count(index_of(*context_.space, p)); }

  StrategyContext context_;
  Options options_;
  Rng rng_;
  std::unordered_set<std::uint64_t> seen_;
  bool has_current_ = false;
  Point current_;
  double current_time_ = 0;
  std::vector<Point> pending_;  ///< unmeasured neighbours of current_, next last
  bool has_home_ = false;
  Point home_;                  ///< best local optimum of this restart
  double home_time_ = 0;
  int failed_perturbations_ = 0;
  bool awaiting_start_ = false;
};

}  // namespace ktune::search
