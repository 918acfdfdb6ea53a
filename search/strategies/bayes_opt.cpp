// Gaussian-process Bayesian optimisation with expected improvement.
#include "search/strategies/bayes_opt.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ktune::search {
namespace {

/// Expected improvement of a normal(mean, sd) below `best` (minimisation).
double expected_improvement(double mean, double sd, double best) {
  const double z = (best - mean) / sd;
  const double cdf = 0.5 * std::erfc(-z / std::sqrt(2.0));
  const double pdf = std::exp(-0.5 * z * z) / std::sqrt(2.0 * M_PI);
  return (best - mean) * cdf + sd * pdf;
}

double distance2(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d += (a[i] - b[i]) * (a[i] - b[i]);
  return d;
}

}  // namespace

BayesOpt::BayesOpt(const StrategyContext& context, Options options)
    : context_(context), options_(options), rng_(context.seed ^ 0x3c6ef372fe94f82bULL), gp_(0),
      cost_(*context.space) {
  const auto& params = context_.space->params();
  for (std::size_t i = 0; i < params.size(); ++i)
    if (params[i].values.size() > 1) dims_.push_back(static_cast<int>(i));
  if (options_.initial <= 0) options_.initial = std::max(5, static_cast<int>(dims_.size()) + 2);
  gp_ = GaussianProcess(dims_.size());
  const std::uint64_t size = context_.space->size();
  enumerated_ = size <= options_.enumerate_limit;
  if (enumerated_) {
    for (std::uint64_t i = 0; i < size; ++i) {
      Point p = point_at(*context_.space, i);
      if (valid(context_, p)) add_candidate(p);
    }
  } else {
    for (int i = 0; i < options_.candidates; ++i)
      if (auto p = random_valid_point(context_, rng_, 20)) add_candidate(*p);
  }
}

std::vector<double> BayesOpt::encode(const Point& p) const {
  std::vector<double> x;
  x.reserve(dims_.size());
  for (int i : dims_)
    x.push_back(static_cast<double>(p[i]) / static_cast<double>(context_.space->params()[i].values.size() - 1));
  return x;
}

void BayesOpt::add_candidate(const Point& p) {
  const std::uint64_t idx = index_of(*context_.space, p);
  if (seen_.count(idx) || pool_id_.count(idx)) return;
  pool_id_[idx] = gp_.add_candidate(encode(p).data());
  pool_.push_back(p);
  ++unmeasured_;
}

std::optional<Point> BayesOpt::design_point() {
  // Farthest (in the encoding) of a few random unmeasured candidates from
  // everything measured: a cheap space-filling design.
  if (unmeasured_ == 0) return std::nullopt;
  std::optional<std::size_t> pick;
  double pick_d = -1;
  for (int draw = 0; draw < options_.design_draws; ++draw) {
    std::size_t id = rng_.uniform(pool_.size());
    for (int retry = 0; retry < 64 && gp_.retired(id); ++retry) id = rng_.uniform(pool_.size());
    if (gp_.retired(id)) continue;
    const std::vector<double> x = encode(pool_[id]);
    double d = INFINITY;
    for (const Observation& o : observations_) d = std::min(d, distance2(o.x, x));
    if (d > pick_d) {
      pick_d = d;
      pick = id;
    }
  }
  if (!pick)
    for (std::size_t id = 0; id < pool_.size() && !pick; ++id)
      if (!gp_.retired(id)) pick = id;
  return pool_[*pick];
}

void BayesOpt::refit() {
  // The model's observations: all of them, or the best and the most recent
  // when there are too many.
  std::vector<std::size_t> use(observations_.size());
  std::iota(use.begin(), use.end(), 0);
  if (static_cast<int>(use.size()) > options_.max_model) {
    const std::size_t recent = static_cast<std::size_t>(options_.max_model) / 4;
    std::vector<std::size_t> older(use.begin(), use.end() - recent);
    std::stable_sort(older.begin(), older.end(),
                     [&](std::size_t a, std::size_t b) { return observations_[a].time < observations_[b].time; });
    older.resize(static_cast<std::size_t>(options_.max_model) - recent);
    older.insert(older.end(), use.end() - recent, use.end());
    use = older;
  }
  std::vector<std::vector<double>> xs;
  std::vector<double> ys;
  for (std::size_t i : use) {
    xs.push_back(observations_[i].x);
    ys.push_back(std::isfinite(observations_[i].time) ? std::log(observations_[i].time) : worst_log_);
  }
  // Hyperparameters on an evenly spread subset, then the full factorisation.
  std::vector<std::vector<double>> fit_xs;
  std::vector<double> fit_ys;
  const std::size_t stride = (xs.size() + options_.fit_max - 1) / static_cast<std::size_t>(options_.fit_max);
  for (std::size_t i = 0; i < xs.size(); i += stride) {
    fit_xs.push_back(xs[i]);
    fit_ys.push_back(ys[i]);
  }
  gp_.reset(xs, ys, GaussianProcess::fit(fit_xs, fit_ys));
  fitted_at_ = observations_.size();
}

BayesOpt::Turn BayesOpt::turn() const {
  if (!stalled()) return Turn::kModel;
  if (options_.neighbour_stall <= 0 || since_improvement_ < static_cast<std::size_t>(options_.neighbour_stall))
    return stalled_steps_ % 2 == 0 ? Turn::kChild : Turn::kModel;
  static constexpr Turn kTurns[] = {Turn::kChild, Turn::kNeighbour, Turn::kModel};
  return kTurns[stalled_steps_ % std::size(kTurns)];
}

std::optional<Point> BayesOpt::neighbour(Rng& rng) const {
  std::vector<const Observation*> ranked;
  for (const Observation& o : observations_)
    if (std::isfinite(o.time)) ranked.push_back(&o);
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const Observation* a, const Observation* b) { return a->time < b->time; });
  for (const Observation* o : ranked) {
    std::vector<Point> around;
    for (Point& q : valid_neighbours(context_, o->point, false))
      if (!seen_.count(index_of(*context_.space, q))) around.push_back(std::move(q));
    if (!around.empty()) return around[rng.uniform(around.size())];
  }
  return std::nullopt;
}

std::optional<Point> BayesOpt::child(Rng& rng) const {
  std::vector<const Observation*> best;
  for (const Observation& o : observations_)
    if (std::isfinite(o.time)) best.push_back(&o);
  const auto k = std::min(best.size(), static_cast<std::size_t>(options_.parents));
  if (k < 2) return std::nullopt;
  std::partial_sort(best.begin(), best.begin() + static_cast<std::ptrdiff_t>(k), best.end(),
                    [](const Observation* a, const Observation* b) { return a->time < b->time; });
  for (int attempt = 0; attempt < 50; ++attempt) {
    const Point& a = best[rng.uniform(k)]->point;
    const Point& b = best[rng.uniform(k)]->point;
    Point c(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) c[i] = rng.uniform(2) ? a[i] : b[i];
    if (!valid(context_, c)) {
      auto repaired = random_valid_within_one_step(context_, rng, c);
      if (!repaired) continue;
      c = std::move(*repaired);
    }
    if (!seen_.count(index_of(*context_.space, c))) return c;
  }
  return std::nullopt;
}

std::optional<Point> BayesOpt::propose() {
  if (static_cast<int>(observations_.size()) < options_.initial || !std::isfinite(best_log_)) return design_point();
  const Turn t = turn();
  if (stalled()) ++stalled_steps_;
  if (t == Turn::kChild)
    if (auto c = child(rng_)) return c;
  if (t == Turn::kNeighbour)
    if (auto q = neighbour(rng_)) return q;
  if (fitted_at_ == 0 ||
      static_cast<double>(observations_.size()) >= options_.refit_growth * static_cast<double>(fitted_at_) ||
      static_cast<int>(gp_.observations()) >= 2 * options_.max_model) {
    refit();
    // Candidates far above the best in every plausible outcome stay out of
    // the incremental updates until the next refit: most of a space, soon.
    for (std::size_t id = 0; id < pool_.size(); ++id) {
      if (!gp_.active(id)) continue;
      double mean, sd;
      gp_.predict(id, &mean, &sd);
      if (mean - options_.dormant_sd * sd > best_log_) gp_.set_dormant(id);
    }
  }
  if (const auto pick = best_candidate()) return pool_[*pick];
  // Every unmeasured candidate sleeps until the next refit: the model has
  // ruled the rest of the space out, but only the budget may end the search.
  // A neighbour of the best configs, else the space-filling design; a refit
  // now would cost seconds on a large space, every time it came to this.
  if (auto q = neighbour(rng_)) return q;
  return design_point();
}

std::optional<std::size_t> BayesOpt::best_candidate() const {
  std::optional<std::size_t> pick;
  double pick_ei = -INFINITY;
  for (std::size_t id = 0; id < pool_.size(); ++id) {
    if (!gp_.active(id)) continue;
    const double ei = acquisition(id);
    if (ei > pick_ei) {
      pick_ei = ei;
      pick = id;
    }
  }
  return pick;
}

double BayesOpt::acquisition(std::size_t id) const {
  double mean, sd;
  gp_.predict(id, &mean, &sd);
  const double ei = expected_improvement(mean, sd, best_log_ - options_.xi);
  if (options_.cost_weight <= 0) return ei;
  return ei / std::pow(cost_.predict(pool_[id]), options_.cost_weight);
}

std::optional<Config> BayesOpt::next() {
  std::optional<Point> p = propose();
  if (!p && !enumerated_) {
    // The sampled candidates are spent: draw more.
    for (int i = 0; i < 64; ++i)
      if (auto q = random_valid_point(context_, rng_, 20)) add_candidate(*q);
    p = propose();
  }
  if (!p) return std::nullopt;
  return config_of(*context_.space, *p);
}

std::vector<Config> BayesOpt::upcoming(std::size_t n) const {
  std::vector<Config> out;
  if (n == 0) return out;
  if (fitted_at_ == 0 || static_cast<int>(observations_.size()) < options_.initial || !std::isfinite(best_log_))
    return out;  // the design points are random draws: nothing to foresee
  Rng rng = rng_;  // the same draws as the next proposal
  if (const Turn t = turn(); t != Turn::kModel)
    if (auto q = t == Turn::kChild ? child(rng) : neighbour(rng)) out.push_back(config_of(*context_.space, *q));
  std::vector<std::pair<double, std::size_t>> ranked;
  for (std::size_t id = 0; id < pool_.size(); ++id)
    if (gp_.active(id)) ranked.emplace_back(-acquisition(id), id);
  if (out.empty() && ranked.empty())  // every candidate sleeps: propose() takes a neighbour of the best
    if (auto q = neighbour(rng)) out.push_back(config_of(*context_.space, *q));
  const std::size_t k = std::min(n, ranked.size());
  std::partial_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(k), ranked.end());
  for (std::size_t i = 0; i < k && out.size() < n; ++i) {
    Config c = config_of(*context_.space, pool_[ranked[i].second]);
    if (out.empty() || c != out.front()) out.push_back(std::move(c));
  }
  return out;
}

void BayesOpt::report(const Config& config, const Outcome& outcome) {
  const Point p = point_of(*context_.space, config);
  const std::uint64_t idx = index_of(*context_.space, p);
  const double t = outcome.ok ? outcome.time_ms : INFINITY;
  if (!seen_.emplace(idx, t).second) return;
  if (const auto it = pool_id_.find(idx); it != pool_id_.end() && !gp_.retired(it->second)) {
    gp_.retire(it->second);
    --unmeasured_;
  }
  observations_.push_back({encode(p), t, p});
  cost_.add(p, outcome.cost_s);
  const bool new_best = std::isfinite(t) && std::log(t) < best_log_;
  since_improvement_ = new_best ? 0 : since_improvement_ + 1;
  if (std::isfinite(t)) {
    best_log_ = std::min(best_log_, std::log(t));
    worst_log_ = std::max(worst_log_, std::log(t));
  }
  if (fitted_at_ > 0) gp_.observe(observations_.back().x.data(), std::isfinite(t) ? std::log(t) : worst_log_);
  if (new_best && !enumerated_)
    for (const Point& q : valid_neighbours(context_, p, false)) add_candidate(q);
}

}  // namespace ktune::search
