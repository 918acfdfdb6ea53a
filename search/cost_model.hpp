// What a config will cost to evaluate (compile + benchmark seconds), learned
// from the configs measured so far: log(cost) as a sum of one term per
// parameter value (the mean deviation of the configs holding that value from
// the overall mean, shrunk towards 0 while few hold it). Compile time follows
// a few parameters (unrolling, tile sizes, code paths) closely, so this
// additive model ranks candidates well at the cost of a table lookup per
// parameter. Strategies use it to prefer cheaper configs when a budget is
// counted in time.
#pragma once
#include <cstddef>
#include <vector>

#include "search/sampling.hpp"

namespace ktune::search {

class CostModel {
 public:
  CostModel() = default;
  explicit CostModel(const Space& space);
  /// A measured config and its cost (s); costs <= 0 are ignored.
  void add(const Point& p, double cost_s);
  /// Predicted cost (s); 1 before anything is known.
  double predict(const Point& p) const;
  std::size_t observations() const { return n_; }

 private:
  static constexpr double kShrink = 2.0;  ///< pseudo-observations at the overall mean per value
  std::vector<std::vector<double>> sum_;  ///< per parameter, per value: sum of log cost
  std::vector<std::vector<int>> count_;
  double total_ = 0;
  std::size_t n_ = 0;
};

}  // namespace ktune::search
