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

std::vector<Config> RandomSample::upcoming(std::size_t n) const {
  LazyPermutation ahead = order_;  // the same draws next() will make
  std::vector<Config> out;
  for (std::size_t tries = 0; out.size() < n && tries < 64 * n; ++tries) {
    const auto index = ahead.next();
    if (!index) break;
    Config c = context_.space->at(*index);
    if (valid(context_, c)) out.push_back(std::move(c));
  }
  return out;
}

}  // namespace ktune::search
