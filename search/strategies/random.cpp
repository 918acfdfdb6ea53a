// Random sampling without replacement (lazy Fisher-Yates over space indices).
#include "search/strategies/random.hpp"

namespace ktune::search {

RandomSample::RandomSample(const StrategyContext& context)
    : context_(context), order_(context.space->size(), context.seed) {}

std::optional<Config> RandomSample::next() {
  while (const auto index = order_.next()) {
    Config c = context_.space->at(*index);
    if (valid(context_, c)) return c;
  }
  return std::nullopt;
}

}  // namespace ktune::search
