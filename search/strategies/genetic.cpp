// Genetic algorithm over an archive of the best measured configs.
//
// Each generation draws parents from the archive (rank-biased: the i-th best
// of n at Beta(1, beta) * n), mixes them by uniform crossover, mutates the
// child, and repairs it when the constraint rejects it: a uniformly random
// valid config within one step of every parameter of the child, as Kernel
// Tuner's genetic_algorithm repairs. A child that was already measured costs
// nothing and is drawn again, so a converged archive keeps recombining its
// members (it reaches configs that combine the values of several good ones)
// before the strategy falls back to a one-parameter step from a parent, then
// to a random config (what is left of the space once draws keep finding
// measured ones: a budget beyond the space measures all of it).
#include "search/strategies/genetic.hpp"

#include <algorithm>
#include <cmath>

namespace ktune::search {

Genetic::Genetic(const StrategyContext& context, Options options)
    : context_(context), options_(options), rng_(context.seed ^ 0x6a09e667f3bcc908ULL), cost_(*context.space) {
  for (int i = 0; i < options_.first_generation * 20 && static_cast<int>(queue_.size()) < options_.first_generation;
       ++i) {
    auto p = random_valid_point(context_, rng_, 50);
    if (p && is_new(*p)) enqueue(std::move(*p));
  }
}

bool Genetic::is_new(const Point& p) const {
  const std::uint64_t idx = index_of(*context_.space, p);
  return !seen_.count(idx) && !queued_.count(idx);
}

void Genetic::enqueue(Point p) {
  queued_.insert(index_of(*context_.space, p));
  queue_.push_back(std::move(p));
}

const Point& Genetic::pick() {
  // Inverse CDF of Beta(1, b): 1 - (1 - u)^(1/b).
  const double x = 1.0 - std::pow(1.0 - rng_.real(), 1.0 / options_.selection_beta);
  const auto n = archive_.size();
  return archive_[std::min(n - 1, static_cast<std::size_t>(x * static_cast<double>(n)))].point;
}

std::optional<Point> Genetic::child() {
  const auto& params = context_.space->params();
  const Point& a = pick();
  const Point& b = pick();
  Point c(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    c[i] = rng_.uniform(2) ? a[i] : b[i];
    const int n = static_cast<int>(params[i].values.size());
    if (n > 1 && rng_.real() < options_.step_chance) {
      if (rng_.real() < 0.7)
        c[i] = std::clamp(c[i] + (rng_.uniform(2) ? 1 : -1), 0, n - 1);
      else
        c[i] = static_cast<int>(rng_.uniform(n));
    }
  }
  if (!valid(context_, c)) {
    auto repaired = random_valid_within_one_step(context_, rng_, c);
    if (!repaired) return std::nullopt;
    c = std::move(*repaired);
  }
  if (rng_.real() < options_.jump_chance) {
    const auto around = valid_neighbours(context_, c, false);
    if (!around.empty()) c = around[rng_.uniform(around.size())];
  }
  return c;
}

void Genetic::breed() {
  std::stable_sort(archive_.begin(), archive_.end(), [](const Member& x, const Member& y) { return x.time < y.time; });
  if (static_cast<int>(archive_.size()) > options_.archive) archive_.resize(options_.archive);
  if (archive_.empty()) {
    exhausted_ = true;
    return;
  }
  int misses = 0;
  converged_ = false;
  const std::size_t before = queue_.size();
  const int pool = options_.cost_pool > 1 && cost_.observations() > 0 ? options_.cost_pool : 1;
  while (static_cast<int>(queue_.size()) < options_.generation * pool) {
    auto c = child();
    if (c && is_new(*c)) {
      enqueue(std::move(*c));
      continue;
    }
    if (++misses <= options_.redraws) continue;
    // The archive has converged: step one parameter of a parent, or sample.
    converged_ = true;
    std::vector<Point> fresh;
    for (Point& q : valid_neighbours(context_, pick(), false))
      if (is_new(q)) fresh.push_back(std::move(q));
    if (!fresh.empty()) {
      enqueue(std::move(fresh[rng_.uniform(fresh.size())]));
    } else {
      auto r = random_valid_point(context_, rng_, 1000);
      if (!r || !is_new(*r))  // most of the space measured: what is left of it
        r = scan_for_valid_point(context_, rng_, [&](std::uint64_t i) { return !seen_.count(i) && !queued_.count(i); });
      if (!r) break;
      enqueue(std::move(*r));
    }
    misses = 0;
  }
  if (pool > 1) {
    // The clearly costlier children go last; the surplus goes back to being unmeasured.
    set_apart_costly(queue_.begin() + static_cast<std::ptrdiff_t>(before), queue_.end(), cost_, options_.cost_cut,
                     true);
    while (queue_.size() > before + static_cast<std::size_t>(options_.generation)) {
      queued_.erase(index_of(*context_.space, queue_.back()));
      queue_.pop_back();
    }
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
    const auto c = twin.next();  // breeds only while `out` is empty, from what is measured
    if (!c) break;
    out.push_back(*c);
  }
  return out;
}

void Genetic::report(const Config& config, const Outcome& outcome) {
  Point p = point_of(*context_.space, config);
  const std::uint64_t idx = index_of(*context_.space, p);
  const double t = outcome.ok ? outcome.time_ms : INFINITY;
  queued_.erase(idx);
  if (!seen_.emplace(idx, t).second) return;
  cost_.add(p, outcome.cost_s);
  archive_.push_back({std::move(p), t});
}

}  // namespace ktune::search
