// Strategy registry: name → factory. A new strategy adds one line here.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>
#include <map>

#include "base/error.hpp"
#include "base/json_input.hpp"
#include "search/strategies/annealing.hpp"
#include "search/strategies/auto.hpp"
#include "search/strategies/bayes_opt.hpp"
#include "search/strategies/exhaustive.hpp"
#include "search/strategies/genetic.hpp"
#include "search/strategies/local_search.hpp"
#include "search/strategies/random.hpp"
#include "search/strategy.hpp"

namespace ktune::search {
namespace {
using Factory = std::function<std::unique_ptr<Strategy>(const StrategyContext&)>;

const std::map<std::string, Factory>& factories() {
  static const std::map<std::string, Factory> f = {
      {"auto", [](const StrategyContext& c) { return std::make_unique<Auto>(c); }},
      // auto with the model's time-aware option on too (Auto::Options), for comparing it on recorded spaces.
      {"auto_timed",
       [](const StrategyContext& c) { return std::make_unique<Auto>(c, Auto::Options{.cost_weight = 1}); }},
      {"exhaustive", [](const StrategyContext& c) { return std::make_unique<Exhaustive>(c); }},
      {"random", [](const StrategyContext& c) { return std::make_unique<RandomSample>(c); }},
      {"genetic", [](const StrategyContext& c) { return std::make_unique<Genetic>(c); }},
      {"local_search", [](const StrategyContext& c) { return std::make_unique<LocalSearch>(c); }},
      {"annealing", [](const StrategyContext& c) { return std::make_unique<Annealing>(c); }},
      {"bayes_opt", [](const StrategyContext& c) { return std::make_unique<BayesOpt>(c); }},
  };
  return f;
}
}  // namespace

std::vector<std::string> strategy_names() {
  std::vector<std::string> names;
  for (const auto& [name, _] : factories()) names.push_back(name);
  return names;
}

void require_strategy(const std::string& name) {
  KTUNE_REQUIRE(factories().count(name) != 0,
                fmt::format("unknown strategy '{}'{}; known: {}", name, did_you_mean(name, strategy_names()),
                            fmt::join(strategy_names(), ", ")));
}

std::unique_ptr<Strategy> make_strategy(const std::string& name, const StrategyContext& context) {
  require_strategy(name);
  return factories().at(name)(context);
}

}  // namespace ktune::search
