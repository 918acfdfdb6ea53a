// Genetic algorithm: rank-weighted selection, uniform crossover, neighbour
// mutation, elitism.
#include "search/strategies/genetic.hpp"

#include <algorithm>
#include <cmath>

namespace ktune::search {

Genetic::Genetic(const StrategyContext& context, Options options)
    : context_(context), options_(options), rng_(context.seed ^ 0x6a09e667f3bcc908ULL) {
  for (int i = 0; i < options_.population * 20 && static_cast<int>(queue_.size()) < options_.population; ++i) {
    const auto p = random_valid_point(context_, rng_, 50);
    if (!p) continue;
    if (queued_.insert(index_of(*context_.space, *p)).second) queue_.push_back(*p);
  }
}

std::optional<Point> Genetic::fresh(Point p) {
  const auto& params = context_.space->params();
  for (int attempt = 0; attempt < 20; ++attempt) {
    const std::uint64_t idx = index_of(*context_.space, p);
    if (!seen_.count(idx) && !queued_.count(idx) && valid(context_, p)) return p;
    // Re-mutate one random parameter by one step.
    const std::size_t i = rng_.uniform(params.size());
    const int n = static_cast<int>(params[i].values.size());
    if (n > 1) p[i] = std::clamp(p[i] + (rng_.uniform(2) ? 1 : -1), 0, n - 1);
  }
  if (auto r = random_valid_point(context_, rng_, 200)) {
    const std::uint64_t idx = index_of(*context_.space, *r);
    if (!seen_.count(idx) && !queued_.count(idx)) return r;
  }
  return std::nullopt;
}

Point Genetic::child_of(const Point& a, const Point& b) {
  const auto& params = context_.space->params();
  Point c(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    c[i] = rng_.uniform(2) ? a[i] : b[i];
    const int n = static_cast<int>(params[i].values.size());
    if (n > 1 && rng_.real() < options_.mutation_chance) {
      // Mostly a step to a neighbouring value, sometimes any value.
      if (rng_.real() < 0.7)
        c[i] = std::clamp(c[i] + (rng_.uniform(2) ? 1 : -1), 0, n - 1);
      else
        c[i] = static_cast<int>(rng_.uniform(n));
    }
  }
  return c;
}

void Genetic::breed() {
  // Survivors: this generation plus the last one's best, ranked by time.
  std::vector<Member> pool = generation_;
  for (const Member& m : population_) pool.push_back(m);
  std::stable_sort(pool.begin(), pool.end(), [](const Member& x, const Member& y) { return x.time < y.time; });
  std::vector<Member> unique;
  std::unordered_set<std::uint64_t> in_pool;
  for (const Member& m : pool)
    if (in_pool.insert(index_of(*context_.space, m.point)).second) unique.push_back(m);
  if (static_cast<int>(unique.size()) > options_.population) unique.resize(options_.population);
  population_ = unique;
  generation_.clear();
  if (population_.empty()) {
    if (auto p = random_valid_point(context_, rng_, 1000)) population_.push_back({*p, INFINITY});
  }
  if (population_.empty()) {
    exhausted_ = true;
    return;
  }
  // Rank weights: the i-th best is drawn with weight (n - i).
  const std::size_t n = population_.size();
  const double total = static_cast<double>(n * (n + 1) / 2);
  auto pick = [&]() -> const Point& {
    double r = rng_.real() * total;
    for (std::size_t i = 0; i < n; ++i) {
      r -= static_cast<double>(n - i);
      if (r < 0) return population_[i].point;
    }
    return population_.back().point;
  };
  int misses = 0;
  while (static_cast<int>(queue_.size()) < options_.population - options_.elite && misses < options_.population * 5) {
    const auto child = fresh(child_of(pick(), pick()));
    if (!child) {
      ++misses;
      continue;
    }
    queued_.insert(index_of(*context_.space, *child));
    queue_.push_back(*child);
  }
  if (queue_.empty()) exhausted_ = true;
}

std::optional<Config> Genetic::next() {
  if (queue_.empty() && !exhausted_) breed();
  if (queue_.empty()) return std::nullopt;
  Point p = queue_.front();
  queue_.pop_front();
  return config_of(*context_.space, p);
}

std::vector<Config> Genetic::upcoming(std::size_t n) const {
  Genetic twin = *this;  // the same generator state: its proposals are ours
  std::vector<Config> out;
  while (out.size() < n && (out.empty() || !twin.queue_.empty())) {
    const auto c = twin.next();  // breeds only while `out` is empty, from a measured generation
    if (!c) break;
    out.push_back(*c);
  }
  return out;
}

void Genetic::report(const Config& config, const Outcome& outcome) {
  const Point p = point_of(*context_.space, config);
  const std::uint64_t idx = index_of(*context_.space, p);
  const double t = outcome.ok ? outcome.time_ms : INFINITY;
  queued_.erase(idx);
  seen_[idx] = t;
  generation_.push_back({p, t});
}

}  // namespace ktune::search
