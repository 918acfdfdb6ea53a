// Search strategies behind one small interface (STYLE.md habit 7): a strategy
// proposes configs with next() and learns from report(); stop conditions
// are separate. One strategy per file in search/strategies/, registered by
// name in search/registry.cpp.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/space.hpp"
#include "search/evaluator.hpp"

namespace ktune::search {

class Strategy {
 public:
  virtual ~Strategy() = default;
  /// The next config to evaluate; nullopt when the strategy has nothing left.
  /// Only configs for which `valid` holds are proposed.
  virtual std::optional<Config> next() = 0;
  /// The outcome of a config returned by next().
  virtual void report(const Config& config, const Outcome& outcome) = 0;
  /// Up to `n` valid configs this strategy expects to propose next, the
  /// likeliest first: a hint for compiling ahead while the GPU measures,
  /// with no effect on the search. Default: none.
  virtual std::vector<Config> upcoming(std::size_t /*n*/) const { return {}; }
};

/// What a strategy may know of the problem: the space, the constraint, a seed.
struct StrategyContext {
  const Space* space = nullptr;
  const Evaluator* evaluator = nullptr;  ///< for is_valid and is_valid_at only
  std::uint64_t seed = 0;
};

/// Strategy names known to make_strategy.
std::vector<std::string> strategy_names();
/// Throws kInvalidInput listing the known names when `name` is none of them.
void require_strategy(const std::string& name);
/// Throws kInvalidInput listing the known names.
std::unique_ptr<Strategy> make_strategy(const std::string& name, const StrategyContext& context);

}  // namespace ktune::search
