// Greedy iterated local search with perturbation and restarts.
#include "search/strategies/local_search.hpp"

#include <cmath>

namespace ktune::search {

LocalSearch::LocalSearch(const StrategyContext& context, Options options)
    : context_(context), options_(options), rng_(context.seed ^ 0xa54ff53a5f1d36f1ULL) {}

void LocalSearch::load_neighbours() {
  pending_.clear();
  for (Point& q : valid_neighbours(context_, current_, options_.adjacent_only))
    if (unseen(q)) pending_.push_back(std::move(q));
  shuffle(pending_, rng_);
  // pending_ is taken from the back: the costlier ones go to the front.
  if (options_.cost) set_apart_costly(pending_.begin(), pending_.end(), *options_.cost, options_.cost_cut, false);
}

std::optional<Point> LocalSearch::start_point() {
  if (has_home_ && failed_perturbations_ < options_.restart_after) {
    // Random walk from the home optimum through valid points.
    for (int attempt = 0; attempt < 20; ++attempt) {
      Point p = home_;
      for (int step = 0; step < options_.perturbation; ++step) {
        const auto around = valid_neighbours(context_, p, false);
        if (around.empty()) break;
        p = around[rng_.uniform(around.size())];
      }
      if (unseen(p)) return p;
    }
  }
  has_home_ = false;
  failed_perturbations_ = 0;
  for (int attempt = 0; attempt < 50; ++attempt) {
    auto p = random_valid_point(context_, rng_, 200);
    if (p && unseen(*p)) return p;
  }
  return scan_for_valid_point(context_, rng_, [&](std::uint64_t i) { return !seen_.count(i); });
}

std::optional<Config> LocalSearch::next() {
  while (has_current_ && !pending_.empty()) {
    Point p = std::move(pending_.back());
    pending_.pop_back();
    if (unseen(p)) return config_of(*context_.space, p);
  }
  if (has_current_) {
    // current_ is a local optimum.
    if (!has_home_ || current_time_ < home_time_) {
      home_ = current_;
      home_time_ = current_time_;
      has_home_ = true;
      failed_perturbations_ = 0;
    } else {
      ++failed_perturbations_;
    }
    has_current_ = false;
  }
  auto p = start_point();
  if (!p) return std::nullopt;
  awaiting_start_ = true;
  return config_of(*context_.space, *p);
}

std::vector<Config> LocalSearch::upcoming(std::size_t n) const {
  std::vector<Config> out;
  if (!has_current_) return out;
  for (auto it = pending_.rbegin(); it != pending_.rend() && out.size() < n; ++it)
    if (unseen(*it)) out.push_back(config_of(*context_.space, *it));
  return out;
}

void LocalSearch::report(const Config& config, const Outcome& outcome) {
  const Point p = point_of(*context_.space, config);
  seen_.insert(index_of(*context_.space, p));
  const double t = outcome.ok ? outcome.time_ms : INFINITY;
  // A start: the point it asked for, or one measured before it was asked (run_search's `first`).
  if (awaiting_start_ || !has_current_) {
    awaiting_start_ = false;
    if (std::isfinite(t)) {
      has_current_ = true;
      current_ = p;
      current_time_ = t;
      load_neighbours();
    }
    return;
  }
  if (has_current_ && t < current_time_) {  // first improvement: move
    current_ = p;
    current_time_ = t;
    load_neighbours();
  }
}

}  // namespace ktune::search
