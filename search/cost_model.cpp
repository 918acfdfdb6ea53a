// Additive model of log evaluation cost per parameter value.
#include "search/cost_model.hpp"

#include <cmath>

namespace ktune::search {

CostModel::CostModel(const Space& space) {
  for (const auto& param : space.params()) {
    sum_.emplace_back(param.values.size(), 0.0);
    count_.emplace_back(param.values.size(), 0);
  }
}

void CostModel::add(const Point& p, double cost_s) {
  if (!(cost_s > 0) || !std::isfinite(cost_s)) return;
  const double y = std::log(cost_s);
  for (std::size_t i = 0; i < sum_.size(); ++i) {
    sum_[i][p[i]] += y;
    ++count_[i][p[i]];
  }
  total_ += y;
  ++n_;
}

double CostModel::predict(const Point& p) const {
  if (n_ == 0) return 1.0;
  const double mean = total_ / static_cast<double>(n_);
  double y = mean;
  for (std::size_t i = 0; i < sum_.size(); ++i) {
    const int c = count_[i][p[i]];
    y += (sum_[i][p[i]] - c * mean) / (c + kShrink);
  }
  return std::exp(y);
}

}  // namespace ktune::search
