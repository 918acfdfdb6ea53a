// Model-guided early, evolutionary late, with restarts (see auto.hpp).
#include "search/strategies/auto.hpp"

#include "search/sampling.hpp"

namespace ktune::search {

Auto::Auto(const StrategyContext& context, Options options) : context_(context), options_(options) {
  // The model's own recombination when stalled is left to the genetic
  // algorithm that follows it.
  BayesOpt::Options model;
  model.stall = 0;
  model.cost_weight = options_.cost_weight;
  if (options_.model_evals > 0) model_ = std::make_unique<BayesOpt>(context_, model);
  else start_genetic(false);
}

void Auto::start_genetic(bool from_measured) {
  Genetic::Options g;
  if (from_measured) g.first_generation = 0;
  g.cost_pool = options_.cost_pool;
  StrategyContext c = context_;
  c.seed = context_.seed ^ (0x9e3779b97f4a7c15ULL * ++starts_);
  genetic_ = std::make_unique<Genetic>(c, g);
  if (from_measured)
    for (const auto& [config, outcome] : measured_) genetic_->report(config, outcome);
  model_.reset();
  since_improvement_ = 0;
}

std::optional<Config> Auto::next() { return model_ ? model_->next() : genetic_->next(); }

void Auto::report(const Config& config, const Outcome& outcome) {
  if (model_) model_->report(config, outcome);
  else genetic_->report(config, outcome);
  if (!seen_.insert(index_of(*context_.space, point_of(*context_.space, config))).second) return;
  measured_.emplace_back(config, outcome);
  if (outcome.ok && outcome.time_ms < best_ms_) {
    best_ms_ = outcome.time_ms;
    since_improvement_ = 0;
  } else {
    ++since_improvement_;
  }
  if (model_ && static_cast<int>(measured_.size()) >= options_.model_evals) start_genetic(true);
  else if (!model_ && options_.patience > 0 && since_improvement_ >= options_.patience) start_genetic(false);
}

std::vector<Config> Auto::upcoming(std::size_t n) const { return model_ ? model_->upcoming(n) : genetic_->upcoming(n); }

}  // namespace ktune::search
