// Model-guided early, a sweep of the best configs' neighbourhoods,
// evolutionary late, local walks when evolution has converged (see auto.hpp).
#include "search/strategies/auto.hpp"

#include <algorithm>

#include "search/sampling.hpp"

namespace ktune::search {

Auto::Auto(const StrategyContext& context, Options options)
    : context_(context), options_(options), cost_(*context.space) {
  // The model's own recombination when stalled is left to the genetic
  // algorithm that follows it.
  BayesOpt::Options model;
  model.stall = 0;
  model.cost_weight = options_.cost_weight;
  if (options_.model_evals > 0) model_ = std::make_unique<BayesOpt>(context_, model);
  else start_genetic();
}

void Auto::start_genetic() {
  Genetic::Options g;
  g.first_generation = measured_.empty() ? Genetic::Options{}.first_generation : 0;
  g.cost_pool = options_.cost_pool;
  StrategyContext c = context_;
  c.seed = context_.seed ^ 0x9e3779b97f4a7c15ULL;
  genetic_ = std::make_unique<Genetic>(c, g);
  for (const auto& [config, outcome] : measured_) genetic_->report(config, outcome);
  if (options_.walk_after > 0) {
    // Restarts from random configs, and steps of one adjacent value: the
    // region it explores is new, and a step there is cheap to take. The
    // neighbours predicted to cost more than the median are tried last.
    LocalSearch::Options w;
    w.adjacent_only = true;
    w.cost = &cost_;
    c.seed = context_.seed ^ 0x3c6ef372fe94f82bULL;
    walk_ = std::make_unique<LocalSearch>(c, w);
  }
  model_.reset();
  // The sweep: the best configs' adjacent neighbours, best config first,
  // each neighbourhood in a seeded random order.
  std::vector<std::pair<double, std::size_t>> ranked;
  for (std::size_t i = 0; i < measured_.size(); ++i)
    if (measured_[i].second.ok) ranked.emplace_back(measured_[i].second.time_ms, i);
  std::stable_sort(ranked.begin(), ranked.end());
  Rng rng(context_.seed ^ 0x510e527fade682d1ULL);
  for (std::size_t r = 0; r < ranked.size() && static_cast<int>(r) < options_.sweep; ++r) {
    auto around = valid_neighbours(context_, point_of(*context_.space, measured_[ranked[r].second].first), true);
    shuffle(around, rng);
    for (auto& q : around)
      if (!measured(q) && std::find(sweep_.begin(), sweep_.end(), q) == sweep_.end()) sweep_.push_back(std::move(q));
  }
}

bool Auto::measured(const Point& p) const { return seen_.count(index_of(*context_.space, p)) != 0; }

std::optional<Config> Auto::next() {
  walk_in_flight_ = false;
  if (model_) return model_->next();
  while (!sweep_.empty()) {
    Point p = std::move(sweep_.front());
    sweep_.pop_front();
    if (!measured(p)) return config_of(*context_.space, p);
  }
  if (walk_ && !walking_ && genetic_->converged() && since_improvement_ >= options_.walk_after) {
    walking_ = true;
    walked_ = 0;
  }
  if (walking_ && walked_++ < options_.walk_length) {
    if (auto c = walk_->next()) {
      walk_in_flight_ = true;
      return c;
    }
  }
  if (walking_) {
    // The walk is spent or found nothing: the genetic algorithm's turn, for
    // another `walk_after` evaluations at least.
    walking_ = false;
    since_improvement_ = 0;
  }
  return genetic_->next();
}

void Auto::report(const Config& config, const Outcome& outcome) {
  if (model_) model_->report(config, outcome);
  else genetic_->report(config, outcome);
  if (walk_in_flight_) walk_->report(config, outcome);
  walk_in_flight_ = false;
  const Point p = point_of(*context_.space, config);
  if (!seen_.insert(index_of(*context_.space, p)).second) return;
  measured_.emplace_back(config, outcome);
  cost_.add(p, outcome.cost_s);
  if (outcome.ok && outcome.time_ms < best_ms_ * (1 - options_.progress)) {
    since_improvement_ = 0;
    walking_ = false;  // a new best: the genetic algorithm breeds from it
  } else {
    ++since_improvement_;
  }
  if (outcome.ok) best_ms_ = std::min(best_ms_, outcome.time_ms);
  if (model_ && static_cast<int>(measured_.size()) >= options_.model_evals) start_genetic();
}

std::vector<Config> Auto::upcoming(std::size_t n) const {
  if (model_) return model_->upcoming(n);
  std::vector<Config> swept;
  for (auto it = sweep_.begin(); it != sweep_.end() && swept.size() < n; ++it)
    if (!measured(*it)) swept.push_back(config_of(*context_.space, *it));
  if (!swept.empty()) return swept;
  if (walking_ && walked_ < options_.walk_length) return walk_->upcoming(n);
  return genetic_->upcoming(n);
}

}  // namespace ktune::search
