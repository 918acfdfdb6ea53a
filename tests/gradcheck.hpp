// Finite-difference gradient checks for the tests: central differences in
// fp64 against a hand-written backward.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

namespace ktune::test {

/// n values uniform in [lo, hi), seeded.
inline std::vector<double> random_values(std::size_t n, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

/// d loss / d x by central differences, perturbing x in place (restored).
inline std::vector<double> numeric_gradient(std::vector<double>& x, const std::function<double()>& loss,
                                            double h = 1e-6) {
  std::vector<double> g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss();
    x[i] = saved - h;
    const double down = loss();
    x[i] = saved;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

/// Largest |a - b| / max(1, |b|) over the elements.
inline double max_rel_error(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(1.0, std::abs(b[i])));
  return a.size() == b.size() ? worst : INFINITY;
}

/// sum(y * r): a scalar loss whose gradient w.r.t. y is r.
inline double weighted_sum(const std::vector<double>& y, const std::vector<double>& r) {
  double s = 0;
  for (std::size_t i = 0; i < y.size(); ++i) s += y[i] * r[i];
  return s;
}

}  // namespace ktune::test
