// Exhaustive: every valid point of the space, in index order.
#include "search/strategies/exhaustive.hpp"

#include <algorithm>

namespace ktune::search {

Exhaustive::Exhaustive(const StrategyContext& context) : context_(context) {}

std::optional<Config> Exhaustive::next() {
  const std::uint64_t n = context_.space->size();
  while (index_ < n) {
    Config c = context_.space->at(index_++);
    if (context_.evaluator == nullptr || context_.evaluator->is_valid(c)) return c;
  }
  return std::nullopt;
}

void Exhaustive::report(const Config&, const Outcome&) {}

std::vector<Config> Exhaustive::upcoming(std::size_t n) const {
  std::vector<Config> out;
  const std::uint64_t end = std::min<std::uint64_t>(context_.space->size(), index_ + 64 * n);
  for (std::uint64_t i = index_; i < end && out.size() < n; ++i) {
    Config c = context_.space->at(i);
    if (context_.evaluator == nullptr || context_.evaluator->is_valid(c)) out.push_back(std::move(c));
  }
  return out;
}

}  // namespace ktune::search
