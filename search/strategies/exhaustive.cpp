// Exhaustive: every valid point of the space, in index order.
#include "search/strategies/exhaustive.hpp"

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

}  // namespace ktune::search
