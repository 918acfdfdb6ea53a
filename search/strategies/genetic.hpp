// Genetic algorithm over an archive: parents are drawn from the best configs
// measured so far, children come from uniform crossover and two mutations
// (one parameter jumps to any value; every parameter may step), invalid
// children are repaired to a valid config within one step of every
// parameter, and a child that was measured before is drawn again.
#pragma once
#include <deque>
#include <unordered_map>
#include <unordered_set>

#include "search/cost_model.hpp"
#include "search/sampling.hpp"
#include "search/strategy.hpp"

namespace ktune::search {

class Genetic final : public Strategy {
 public:
  struct Options {
    int archive = 16;                ///< parents come from the best this many configs measured
    int generation = 8;              ///< children bred at a time
    int first_generation = 16;       ///< random configs measured before breeding (0: breed from what is reported)
    double selection_beta = 2.5;     ///< the i-th best of n is drawn at Beta(1, beta) * n: lower = less greedy
    double jump_chance = 0.1;        ///< per child: one parameter takes any other valid value
    double step_chance = 0.03;       ///< per parameter: a step to the next value (7 in 10) or any value
    int redraws = 50;                ///< measured children drawn again before a step from a parent instead
    /// Time-aware breeding: each generation is bred this many times over,
    /// and a child whose predicted cost (a cost model of what was measured,
    /// cost_model.hpp) is above `cost_cut` times the brood's median is
    /// proposed only when too few cheaper ones were bred
    /// (set_apart_costly). 1: every child bred is proposed.
    int cost_pool = 1;
    double cost_cut = 1.2;  ///< see cost_pool
  };
  explicit Genetic(const StrategyContext& context) : Genetic(context, Options{}) {}
  Genetic(const StrategyContext& context, Options options);
  std::optional<Config> next() override;
  void report(const Config& config, const Outcome& outcome) override;
  /// The rest of the current generation (bred first when it is spent).
  std::vector<Config> upcoming(std::size_t n) const override;
  /// True when the last generation bred needed a one-parameter step or a
  /// random draw: recombining the archive no longer gave new configs.
  bool converged() const { return converged_; }

 private:
  struct Member {
    Point point;
    double time;
  };
  void breed();
  const Point& pick();
  std::optional<Point> child();    ///< a valid child, measured or not; nullopt when none could be made
  bool is_new(const Point& p) const;  ///< neither measured nor queued
  void enqueue(Point p);

  StrategyContext context_;
  Options options_;
  Rng rng_;
  std::deque<Point> queue_;                         ///< proposed, not yet handed out
  std::vector<Member> archive_;                     ///< everything measured; sorted and cut when breeding
  std::unordered_map<std::uint64_t, double> seen_;  ///< index → time
  std::unordered_set<std::uint64_t> queued_;
  CostModel cost_;
  bool exhausted_ = false;
  bool converged_ = false;
};

}  // namespace ktune::search
