// What a config will cost to evaluate (compile + benchmark seconds), learned
// from the configs measured so far: log(cost) as a sum of one term per
// parameter value (the mean deviation of the configs holding that value from
// the overall mean, shrunk towards 0 while few hold it). Compile time follows
// a few parameters (unrolling, tile sizes, code paths) closely, so this
// additive model ranks candidates well at the cost of a table lookup per
// parameter. Strategies use it to prefer cheaper configs when a budget is
// counted in time.
#pragma once
#include <algorithm>
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

/// Reorders the points of [first, last) so that those `model` predicts to
/// cost more than `cut` times their median come after the others
/// (`costly_last`) or before them, each group in the order it had. Setting
/// apart only the clearly costlier, rather than sorting by cost, leaves alone
/// points whose costs differ by noise: on pnpoly (0.11-0.13 s a config)
/// preferring the cheapest steered the search off the optimum.
template <class It>
void set_apart_costly(It first, It last, const CostModel& model, double cut, bool costly_last) {
  if (last - first < 2) return;
  std::vector<double> cost;
  for (It it = first; it != last; ++it) cost.push_back(model.predict(*it));
  const auto mid = cost.begin() + static_cast<std::ptrdiff_t>(cost.size() / 2);
  std::nth_element(cost.begin(), mid, cost.end());
  const double limit = cut * *mid;
  std::stable_partition(first, last, [&](const Point& p) { return (model.predict(p) <= limit) == costly_last; });
}

}  // namespace ktune::search
