// Simulated annealing over one-parameter neighbours with restarts.
#include "search/strategies/annealing.hpp"

#include <cmath>

namespace ktune::search {

Annealing::Annealing(const StrategyContext& context, Options options)
    : context_(context), options_(options), rng_(context.seed ^ 0xbb67ae8584caa73bULL),
      temperature_(options.t_start) {}

std::optional<Point> Annealing::restart() {
  temperature_ = options_.t_start;
  current_.reset();
  for (int attempt = 0; attempt < 50; ++attempt) {
    auto p = random_valid_point(context_, rng_, 200);
    if (p && !seen_.count(index_of(*context_.space, *p))) return p;
  }
  return scan_for_valid_point(context_, rng_, [&](std::uint64_t i) { return !seen_.count(i); });
}

std::optional<Point> Annealing::unmeasured_neighbour(const Point& from) {
  // Draw random one-parameter moves (a step to an adjacent value twice as
  // often as a jump) before falling back to listing all neighbours.
  const auto& params = context_.space->params();
  for (int attempt = 0; attempt < 30; ++attempt) {
    Point q = from;
    const std::size_t i = rng_.uniform(params.size());
    const int n = static_cast<int>(params[i].values.size());
    if (n < 2) continue;
    if (rng_.uniform(3) < 2) {
      q[i] += rng_.uniform(2) ? 1 : -1;
      if (q[i] < 0 || q[i] >= n) continue;
    } else {
      q[i] = static_cast<int>(rng_.uniform(n - 1));
      if (q[i] >= from[i]) ++q[i];
    }
    if (!seen_.count(index_of(*context_.space, q)) && valid(context_, q)) return q;
  }
  std::vector<Point> fresh;
  for (Point& q : valid_neighbours(context_, from, false))
    if (!seen_.count(index_of(*context_.space, q))) fresh.push_back(std::move(q));
  if (fresh.empty()) return std::nullopt;
  return fresh[rng_.uniform(fresh.size())];
}

std::optional<Config> Annealing::next() {
  std::optional<Point> p;
  if (current_ && temperature_ >= options_.t_min) p = unmeasured_neighbour(*current_);
  if (!p) p = restart();
  if (!p) return std::nullopt;
  return config_of(*context_.space, *p);
}

std::vector<Config> Annealing::upcoming(std::size_t n) const {
  Annealing twin = *this;  // the same generator state: its next() is ours
  std::vector<Config> out;
  const auto first = twin.next();
  if (!first || n == 0) return out;
  out.push_back(*first);
  if (!current_) return out;
  for (const Point& p : valid_neighbours(context_, *current_, false)) {
    if (out.size() >= n) break;
    if (seen_.count(index_of(*context_.space, p))) continue;
    Config c = config_of(*context_.space, p);
    if (c != out.front()) out.push_back(std::move(c));
  }
  return out;
}

void Annealing::report(const Config& config, const Outcome& outcome) {
  const Point p = point_of(*context_.space, config);
  const double t = outcome.ok ? outcome.time_ms : INFINITY;
  seen_[index_of(*context_.space, p)] = t;
  if (!current_) {
    if (std::isfinite(t)) {
      current_ = p;
      current_time_ = t;
    }
    return;
  }
  double accept = 0;
  if (t < current_time_) {
    accept = 1;
  } else if (std::isfinite(t)) {
    accept = std::exp(-((t - current_time_) / current_time_) / temperature_);
  }
  if (rng_.real() < accept) {
    current_ = p;
    current_time_ = t;
  }
  temperature_ *= options_.alpha;
}

}  // namespace ktune::search
