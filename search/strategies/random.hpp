// Random sampling without replacement: valid configs in a seeded random
// order, drawn lazily so a 10^9-point space costs memory only for what is drawn.
#pragma once
#include "search/sampling.hpp"
#include "search/strategy.hpp"

namespace ktune::search {

class RandomSample final : public Strategy {
 public:
  explicit RandomSample(const StrategyContext& context);
  std::optional<Config> next() override;
  void report(const Config&, const Outcome&) override {}
  std::vector<Config> upcoming(std::size_t n) const override;

 private:
  StrategyContext context_;
  LazyPermutation order_;
};

}  // namespace ktune::search
