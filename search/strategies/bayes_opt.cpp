// Gaussian-process Bayesian optimisation with expected improvement.
#include "search/strategies/bayes_opt.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ktune::search {
namespace {

double matern52(const std::vector<double>& a, const std::vector<double>& b, double length_scale) {
  double d2 = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d2 += (a[i] - b[i]) * (a[i] - b[i]);
  const double r = std::sqrt(5.0 * d2) / length_scale;
  return (1.0 + r + r * r / 3.0) * std::exp(-r);
}

/// In-place Cholesky of the n×n row-major matrix; false if not positive definite.
bool cholesky(std::vector<double>& a, std::size_t n) {
  for (std::size_t j = 0; j < n; ++j) {
    double d = a[j * n + j];
    for (std::size_t k = 0; k < j; ++k) d -= a[j * n + k] * a[j * n + k];
    if (d <= 0) return false;
    d = std::sqrt(d);
    a[j * n + j] = d;
    for (std::size_t i = j + 1; i < n; ++i) {
      double s = a[i * n + j];
      for (std::size_t k = 0; k < j; ++k) s -= a[i * n + k] * a[j * n + k];
      a[i * n + j] = s / d;
    }
  }
  return true;
}

/// Solves L y = b (forward substitution), L lower triangular row-major.
std::vector<double> forward(const std::vector<double>& l, std::size_t n, std::vector<double> b) {
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t k = 0; k < i; ++k) b[i] -= l[i * n + k] * b[k];
    b[i] /= l[i * n + i];
  }
  return b;
}

/// Solves Lᵀ x = y (back substitution).
std::vector<double> backward(const std::vector<double>& l, std::size_t n, std::vector<double> y) {
  for (std::size_t i = n; i-- > 0;) {
    for (std::size_t k = i + 1; k < n; ++k) y[i] -= l[k * n + i] * y[k];
    y[i] /= l[i * n + i];
  }
  return y;
}

constexpr double kNoise = 1e-4;  // jitter: replayed timings repeat exactly, real ones do not

struct Model {
  std::vector<std::vector<double>> x;
  std::vector<double> l;      // Cholesky factor of K + noise
  std::vector<double> alpha;  // (K + noise)^-1 y
  double length_scale = 0.3;
  double log_likelihood = -INFINITY;

  bool fit(const std::vector<std::vector<double>>& xs, const std::vector<double>& y, double ls) {
    const std::size_t n = xs.size();
    x = xs;
    length_scale = ls;
    l.assign(n * n, 0);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j <= i; ++j) {
        const double k = matern52(xs[i], xs[j], ls) + (i == j ? kNoise : 0);
        l[i * n + j] = k;
        l[j * n + i] = k;
      }
    if (!cholesky(l, n)) return false;
    const std::vector<double> z = forward(l, n, y);
    alpha = backward(l, n, z);
    double logdet = 0;
    for (std::size_t i = 0; i < n; ++i) logdet += std::log(l[i * n + i]);
    log_likelihood = -0.5 * std::inner_product(z.begin(), z.end(), z.begin(), 0.0) - logdet;
    return true;
  }

  void predict(const std::vector<double>& q, double* mean, double* sd) const {
    const std::size_t n = x.size();
    std::vector<double> k(n);
    for (std::size_t i = 0; i < n; ++i) k[i] = matern52(q, x[i], length_scale);
    *mean = std::inner_product(k.begin(), k.end(), alpha.begin(), 0.0);
    const std::vector<double> v = forward(l, n, k);
    const double var = 1.0 + kNoise - std::inner_product(v.begin(), v.end(), v.begin(), 0.0);
    *sd = std::sqrt(std::max(var, 1e-12));
  }
};

double expected_improvement(double mean, double sd, double best) {
  const double z = (best - mean) / sd;
  const double cdf = 0.5 * std::erfc(-z / std::sqrt(2.0));
  const double pdf = std::exp(-0.5 * z * z) / std::sqrt(2.0 * M_PI);
  return (best - mean) * cdf + sd * pdf;
}

}  // namespace

BayesOpt::BayesOpt(const StrategyContext& context, Options options)
    : context_(context), options_(options), rng_(context.seed ^ 0x3c6ef372fe94f82bULL) {
  const auto& params = context_.space->params();
  for (std::size_t i = 0; i < params.size(); ++i)
    if (params[i].values.size() > 1) dims_.push_back(static_cast<int>(i));
  if (options_.initial <= 0) options_.initial = std::clamp(2 * static_cast<int>(dims_.size()), 8, 20);
}

std::vector<double> BayesOpt::encode(const Point& p) const {
  std::vector<double> x;
  x.reserve(dims_.size());
  for (int i : dims_)
    x.push_back(static_cast<double>(p[i]) / static_cast<double>(context_.space->params()[i].values.size() - 1));
  return x;
}

std::optional<Point> BayesOpt::random_unmeasured() {
  for (int attempt = 0; attempt < 20; ++attempt) {
    auto p = random_valid_point(context_, rng_, 100);
    if (p && !seen_.count(index_of(*context_.space, *p))) return p;
  }
  return std::nullopt;
}

std::optional<Point> BayesOpt::propose() {
  // Training set: successes and failures (at the worst observed value);
  // the best and the most recent when there are too many.
  std::vector<const Observation*> obs;
  for (const auto& o : observations_) obs.push_back(&o);
  double worst = -INFINITY;
  for (const auto* o : obs)
    if (std::isfinite(o->time)) worst = std::max(worst, std::log(o->time));
  if (!std::isfinite(worst)) return random_unmeasured();
  if (static_cast<int>(obs.size()) > options_.max_train) {
    const int recent = options_.max_train / 4;
    std::vector<const Observation*> keep(obs.end() - recent, obs.end());
    std::vector<const Observation*> rest(obs.begin(), obs.end() - recent);
    std::stable_sort(rest.begin(), rest.end(), [](auto* a, auto* b) { return a->time < b->time; });
    rest.resize(options_.max_train - recent);
    keep.insert(keep.end(), rest.begin(), rest.end());
    obs = keep;
  }
  std::vector<std::vector<double>> xs;
  std::vector<double> y;
  for (const auto* o : obs) {
    xs.push_back(o->x);
    y.push_back(std::isfinite(o->time) ? std::log(o->time) : worst);
  }
  const double mu = std::accumulate(y.begin(), y.end(), 0.0) / static_cast<double>(y.size());
  double var = 0;
  for (double v : y) var += (v - mu) * (v - mu);
  const double sd = std::sqrt(var / static_cast<double>(y.size())) + 1e-9;
  for (double& v : y) v = (v - mu) / sd;
  const double best = *std::min_element(y.begin(), y.end());

  // Length scale by marginal likelihood, refreshed every few observations.
  Model model;
  if (observations_.size() % 5 == 0 || observations_.size() <= static_cast<std::size_t>(options_.initial) + 1) {
    Model trial;
    double best_ll = -INFINITY;
    for (double ls : {0.1, 0.2, 0.4, 0.8, 1.6})
      if (trial.fit(xs, y, ls) && trial.log_likelihood > best_ll) {
        best_ll = trial.log_likelihood;
        length_scale_ = ls;
      }
  }
  if (!model.fit(xs, y, length_scale_)) return random_unmeasured();

  // Candidates: random unmeasured valid configs and neighbours of the best.
  std::vector<Point> candidates;
  std::unordered_set<std::uint64_t> in_set;
  auto add = [&](Point p) {
    const auto idx = index_of(*context_.space, p);
    if (!seen_.count(idx) && in_set.insert(idx).second) candidates.push_back(std::move(p));
  };
  std::vector<const Observation*> ranked;
  for (const auto& o : observations_) ranked.push_back(&o);
  std::stable_sort(ranked.begin(), ranked.end(), [](auto* a, auto* b) { return a->time < b->time; });
  for (int i = 0; i < options_.top_neighbours && i < static_cast<int>(ranked.size()); ++i)
    for (Point& q : valid_neighbours(context_, ranked[i]->point, false)) add(std::move(q));
  for (int i = 0; i < options_.candidates; ++i)
    if (auto p = random_valid_point(context_, rng_, 20)) add(std::move(*p));
  if (candidates.empty()) return random_unmeasured();

  std::size_t pick = 0;
  double best_ei = -INFINITY;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    double m, s;
    model.predict(encode(candidates[i]), &m, &s);
    const double ei = expected_improvement(m, s, best);
    if (ei > best_ei) {
      best_ei = ei;
      pick = i;
    }
  }
  return candidates[pick];
}

std::optional<Config> BayesOpt::next() {
  std::optional<Point> p = static_cast<int>(observations_.size()) < options_.initial ? random_unmeasured() : propose();
  if (!p) return std::nullopt;
  return config_of(*context_.space, *p);
}

void BayesOpt::report(const Config& config, const Outcome& outcome) {
  const Point p = point_of(*context_.space, config);
  const auto idx = index_of(*context_.space, p);
  if (!seen_.insert(idx).second) return;
  observations_.push_back({p, encode(p), outcome.ok ? outcome.time_ms : INFINITY});
}

}  // namespace ktune::search
