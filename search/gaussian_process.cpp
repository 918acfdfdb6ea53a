// Gaussian process with an incrementally grown Cholesky factor and cached
// candidate posteriors.
#include "search/gaussian_process.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ktune::search {
namespace {

double matern52(const double* a, const double* b, const double* inverse_scales, std::size_t dims) {
  double d2 = 0;
  for (std::size_t i = 0; i < dims; ++i) {
    const double d = (a[i] - b[i]) * inverse_scales[i];
    d2 += d * d;
  }
  const double r = std::sqrt(5.0 * d2);
  return (1.0 + r + r * r / 3.0) * std::exp(-r);
}

double dot(const double* a, const double* b, std::size_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

/// Mean and standard deviation of ys (sd floored so constant targets stay usable).
void moments(const std::vector<double>& ys, double* mean, double* sd) {
  const double n = static_cast<double>(ys.size());
  *mean = std::accumulate(ys.begin(), ys.end(), 0.0) / n;
  double var = 0;
  for (double v : ys) var += (v - *mean) * (v - *mean);
  *sd = std::max(std::sqrt(var / n), 1e-9);
}

/// Log marginal likelihood of standardised ys under the hyperparameters (up to
/// a constant); -inf when K + noise·I is not positive definite.
double log_likelihood(const std::vector<std::vector<double>>& xs, const std::vector<double>& ys,
                      const GaussianProcess::Hyper& h) {
  const std::size_t n = xs.size(), dims = h.length_scales.size();
  std::vector<double> inverse(dims);
  for (std::size_t i = 0; i < dims; ++i) inverse[i] = 1.0 / h.length_scales[i];
  double mean, sd;
  moments(ys, &mean, &sd);
  std::vector<double> l(n * n, 0.0), z(n);
  double logdet = 0;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j <= i; ++j) {
      double s = matern52(xs[i].data(), xs[j].data(), inverse.data(), dims) + (i == j ? h.noise : 0.0);
      s -= dot(&l[i * n], &l[j * n], j);
      if (i == j) {
        if (s <= 0) return -INFINITY;
        l[i * n + i] = std::sqrt(s);
      } else {
        l[i * n + j] = s / l[j * n + j];
      }
    }
    z[i] = ((ys[i] - mean) / sd - dot(&l[i * n], z.data(), i)) / l[i * n + i];
    logdet += std::log(l[i * n + i]);
  }
  return -0.5 * dot(z.data(), z.data(), n) - logdet;
}

}  // namespace

double GaussianProcess::kernel(const double* a, const double* b) const {
  return matern52(a, b, inverse_scales_.data(), dims_);
}

std::size_t GaussianProcess::add_candidate(const double* x) {
  cx_.insert(cx_.end(), x, x + dims_);
  state_.push_back(kActive);
  v_.emplace_back();
  vv_.push_back(0);
  vzy_.push_back(0);
  vz1_.push_back(0);
  refresh_candidate(state_.size() - 1);
  return state_.size() - 1;
}

void GaussianProcess::refresh_candidate(std::size_t id) {
  const std::size_t n = y_.size();
  const double* c = cx_.data() + id * dims_;  // a space of no dimensions holds none
  std::vector<double>& v = v_[id];
  v.resize(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = (kernel(&x_[i * dims_], c) - dot(l_[i].data(), v.data(), i)) / l_[i][i];
  vv_[id] = dot(v.data(), v.data(), n);
  vzy_[id] = dot(v.data(), zy_.data(), n);
  vz1_[id] = dot(v.data(), z1_.data(), n);
}

void GaussianProcess::reset(const std::vector<std::vector<double>>& xs, const std::vector<double>& ys, Hyper hyper) {
  hyper_ = std::move(hyper);
  for (std::size_t i = 0; i < dims_; ++i) inverse_scales_[i] = 1.0 / hyper_.length_scales[i];
  x_.clear();
  y_.clear();
  l_.clear();
  zy_.clear();
  z1_.clear();
  sum_y_ = sum_y2_ = 0;
  // Grow the factor without touching the candidates, then solve for each once.
  for (State& s : state_)
    if (s == kActive) s = kDormant;
  for (std::size_t i = 0; i < xs.size(); ++i) observe(xs[i].data(), ys[i]);
  for (std::size_t id = 0; id < state_.size(); ++id)
    if (state_[id] != kRetired) {
      state_[id] = kActive;
      refresh_candidate(id);
    }
}

void GaussianProcess::observe(const double* x, double y) {
  const std::size_t n = y_.size();
  std::vector<double> row(n + 1);
  for (std::size_t i = 0; i < n; ++i)
    row[i] = (kernel(&x_[i * dims_], x) - dot(l_[i].data(), row.data(), i)) / l_[i][i];
  // The new pivot; a floor keeps the factor usable when a point nearly repeats another.
  const double pivot = std::sqrt(std::max(1.0 + hyper_.noise - dot(row.data(), row.data(), n), 1e-10));
  row[n] = pivot;
  const double zy = (y - dot(row.data(), zy_.data(), n)) / pivot;
  const double z1 = (1.0 - dot(row.data(), z1_.data(), n)) / pivot;
  for (std::size_t id = 0; id < state_.size(); ++id) {
    if (state_[id] != kActive) continue;
    std::vector<double>& v = v_[id];
    const double vn = (kernel(&cx_[id * dims_], x) - dot(row.data(), v.data(), n)) / pivot;
    v.push_back(vn);
    vv_[id] += vn * vn;
    vzy_[id] += vn * zy;
    vz1_[id] += vn * z1;
  }
  x_.insert(x_.end(), x, x + dims_);
  y_.push_back(y);
  l_.push_back(std::move(row));
  zy_.push_back(zy);
  z1_.push_back(z1);
  sum_y_ += y;
  sum_y2_ += y * y;
}

void GaussianProcess::predict(std::size_t id, double* mean, double* sd) const {
  const double n = static_cast<double>(y_.size());
  if (n == 0) {
    *mean = 0;
    *sd = 1;
    return;
  }
  const double mu = sum_y_ / n;
  const double scale = std::sqrt(std::max(sum_y2_ / n - mu * mu, 1e-18));
  // Posterior mean with prior mean mu: mu + k·K⁻¹(y - mu) = mu + v·zy - mu v·z1.
  *mean = mu + vzy_[id] - mu * vz1_[id];
  *sd = scale * std::sqrt(std::max(1.0 - vv_[id], 1e-12));
}

GaussianProcess::Hyper GaussianProcess::fit(const std::vector<std::vector<double>>& xs,
                                            const std::vector<double>& ys) {
  const std::size_t dims = xs.empty() ? 0 : xs[0].size();
  Hyper best{std::vector<double>(dims, 0.3), 1e-3};
  double best_ll = -INFINITY;
  auto consider = [&](const Hyper& h) {
    const double ll = log_likelihood(xs, ys, h);
    if (ll > best_ll) {
      best_ll = ll;
      best = h;
    }
  };
  // Shared length scales from a tenth of the unit cube to beyond its side;
  // noise from near-exact to rough.
  for (double noise : {1e-4, 1e-2, 1e-1})
    for (double ls : {0.1, 0.15, 0.22, 0.33, 0.5, 0.75, 1.1, 1.6}) consider({std::vector<double>(dims, ls), noise});
  // Per-dimension refinement, bounded to [0.05, 20].
  for (int sweep = 0; sweep < 2; ++sweep)
    for (std::size_t d = 0; d < dims; ++d)
      for (double factor : {0.25, 0.5, 2.0, 4.0}) {
        Hyper h = best;
        h.length_scales[d] = std::clamp(h.length_scales[d] * factor, 0.05, 20.0);
        if (h.length_scales[d] != best.length_scales[d]) consider(h);
      }
  return best;
}

}  // namespace ktune::search
