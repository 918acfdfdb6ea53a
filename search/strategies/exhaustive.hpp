// Exhaustive search: every valid point of the space, in index order.
#pragma once
#include "search/strategy.hpp"

namespace ktune::search {

class Exhaustive final : public Strategy {
 public:
  explicit Exhaustive(const StrategyContext& context);
  std::optional<Config> next() override;
  void report(const Config& config, const Outcome& outcome) override;
  std::vector<Config> upcoming(std::size_t n) const override;

 private:
  StrategyContext context_;
  std::uint64_t index_ = 0;
};

}  // namespace ktune::search
