// Genetic algorithm, after Kernel Tuner's genetic_algorithm: a population of
// configs, parents drawn by rank weight, uniform crossover, per-parameter
// mutation to a neighbouring domain value, elitism, and repair of invalid or
// already-measured children by re-mutation or a fresh random valid config.
#pragma once
#include <deque>
#include <unordered_map>
#include <unordered_set>

#include "search/sampling.hpp"
#include "search/strategy.hpp"

namespace ktune::search {

class Genetic final : public Strategy {
 public:
  struct Options {
    int population = 10;
    int elite = 2;
    double mutation_chance = 0.1;  ///< per parameter
  };
  explicit Genetic(const StrategyContext& context) : Genetic(context, Options{}) {}
  Genetic(const StrategyContext& context, Options options);
  std::optional<Config> next() override;
  void report(const Config& config, const Outcome& outcome) override;
  /// The rest of the current generation (bred first when it is spent).
  std::vector<Config> upcoming(std::size_t n) const override;

 private:
  struct Member {
    Point point;
    double time;
  };
  void breed();
  Point child_of(const Point& a, const Point& b);
  std::optional<Point> fresh(Point p);  ///< valid and not yet measured, or nullopt

  StrategyContext context_;
  Options options_;
  Rng rng_;
  std::deque<Point> queue_;                         ///< proposed, not yet handed out
  std::vector<Member> generation_;                  ///< measured members of the current generation
  std::unordered_map<std::uint64_t, double> seen_;  ///< index → time
  std::unordered_set<std::uint64_t> queued_;
  std::vector<Member> population_;                  ///< last generation, best first
  bool exhausted_ = false;
};

}  // namespace ktune::search
