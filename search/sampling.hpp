// Shared tools for strategies: a portable seeded generator (same numbers on
// every platform, unlike std:: distributions), sampling without replacement
// that never materialises the space (lazy Fisher-Yates), and configs as
// vectors of domain positions, which is what the metaheuristics mutate.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <vector>

#include "base/space.hpp"
#include "search/strategy.hpp"

namespace ktune::search {

/// xoshiro256** seeded by splitmix64: reproducible for a seed, everywhere.
class Rng {
 public:
  explicit Rng(std::uint64_t seed);
  std::uint64_t next();
  /// Uniform in [0, n) without modulo bias; n > 0.
  std::uint64_t uniform(std::uint64_t n);
  /// Uniform in [0, 1).
  double real();
  /// Standard normal (Box-Muller).
  double normal();

 private:
  std::uint64_t s_[4];
};

/// The indices [0, n) in a uniformly random order, drawn one at a time with
/// memory proportional to the number drawn (a lazy Fisher-Yates shuffle).
class LazyPermutation {
 public:
  LazyPermutation(std::uint64_t n, std::uint64_t seed) : n_(n), rng_(seed) {}
  std::optional<std::uint64_t> next();
  std::uint64_t drawn() const { return drawn_; }

 private:
  std::uint64_t n_;
  std::uint64_t drawn_ = 0;
  Rng rng_;
  std::unordered_map<std::uint64_t, std::uint64_t> swapped_;
};

/// A config as the position of each parameter's value in its domain, in the
/// space's parameter order.
using Point = std::vector<int>;

Point point_of(const Space& space, const Config& config);
Config config_of(const Space& space, const Point& point);
/// Mixed-radix index of a point (Space::at order).
std::uint64_t index_of(const Space& space, const Point& point);
Point point_at(const Space& space, std::uint64_t index);

/// The strategy context's constraint (true when no evaluator is given).
bool valid(const StrategyContext& context, const Config& config);
bool valid(const StrategyContext& context, const Point& point);

/// A uniformly random valid point by rejection, nullopt after `tries` misses.
std::optional<Point> random_valid_point(const StrategyContext& context, Rng& rng, int tries = 1000);

/// The first valid point whose index `fresh` accepts, scanning the space's
/// indices onwards from a random one (wrapping round), at most `limit` of
/// them; nullopt when there is none among those. What a strategy falls back
/// on when random draws keep finding measured points: most of the space
/// measured, the few left unmeasured still reached, so a budget larger than
/// the space ends with every valid config measured.
std::optional<Point> scan_for_valid_point(const StrategyContext& context, Rng& rng,
                                          const std::function<bool(std::uint64_t)>& fresh,
                                          std::uint64_t limit = std::uint64_t{1} << 20);

/// A uniformly random valid point, other than `point`, within one step of it
/// in every parameter (each moves to the previous or next value of its domain
/// or stays): Kernel Tuner's "strictly-adjacent" neighbourhood, the nearest
/// valid configs to an invalid one. nullopt when there is none.
std::optional<Point> random_valid_within_one_step(const StrategyContext& context, Rng& rng, const Point& point);

/// Valid points that differ from `point` in one parameter (any other value
/// of its domain when `adjacent` is false, only the next/previous value when true).
std::vector<Point> valid_neighbours(const StrategyContext& context, const Point& point, bool adjacent);

/// Puts `points` in a random order (Fisher-Yates with the portable generator).
void shuffle(std::vector<Point>& points, Rng& rng);

}  // namespace ktune::search
