// The Transformer on the cpu backend: host buffers laid out by the memory
// plan, and the step's walk (model/walk.hpp) over CpuOps<T>.
#include "model/transformer.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "base/error.hpp"
#include "model/gemm.hpp"

namespace ktune::model {

template <class T>
Transformer<T>::Transformer(const ModelConfig& config, const RunShape& shape, Allocation allocation, unsigned threads)
    : config_(config), shape_(shape), allocation_(allocation), parallel_(threads) {
  config_.validate();
  shape_.validate();
  L_ = model::step_layout(config_, shape_, parallel_.threads(), allocation_);
  const bool train = L_.train;
  plan_ = plan_memory(config_, shape_, parallel_.threads(), sizeof(T));
  params_.assign(L_.params.total, T(0));
  if (train) grads_.assign(L_.params.total, T(0));
  layer_acts_.assign(L_.region_elements(Region::kLayers), T(0));
  final_acts_.assign(L_.final.size, T(0));
  work_.assign(L_.work.size, T(0));
  tokens_.assign(shape_.tokens(), 0);
  targets_.assign(shape_.tokens(), 0);
  auto& bases = bases_;
  bases[static_cast<int>(Region::kParams)] = params_.data();
  bases[static_cast<int>(Region::kGrads)] = train ? grads_.data() : nullptr;
  bases[static_cast<int>(Region::kLayers)] = layer_acts_.data();
  bases[static_cast<int>(Region::kFinal)] = final_acts_.data();
  bases[static_cast<int>(Region::kWork)] = work_.data();
  bases[static_cast<int>(Region::kTokens)] = tokens_.data();
  bases[static_cast<int>(Region::kTargets)] = targets_.data();
  ops_ = std::make_unique<CpuOps<T>>(bases, L_.work, parallel_);
  walk_init(*ops_, L_);
  set_gemm_threads(parallel_.threads());
  init_parameters(0);
}

template <class T>
Transformer<T>::~Transformer() = default;

template <class T>
std::span<T> Transformer<T>::parameter(const std::string& name) {
  const auto& info = L_.params.find(name);
  return std::span<T>(params_).subspan(info.offset, info.numel);
}

template <class T>
std::span<T> Transformer<T>::gradient(const std::string& name) {
  KTUNE_REQUIRE(L_.train, "a forward-only model has no gradients");
  const auto& info = L_.params.find(name);
  return std::span<T>(grads_).subspan(info.offset, info.numel);
}

template <class T>
void Transformer<T>::init_parameters(std::uint64_t seed) {
  model::init_parameters<T>(L_.params, params_.data(), seed);
}

template <class T>
double Transformer<T>::forward(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets) {
  const std::int64_t N = shape_.tokens();
  KTUNE_REQUIRE(static_cast<std::int64_t>(tokens.size()) == N && static_cast<std::int64_t>(targets.size()) == N,
                fmt::format("forward needs batch*context = {} tokens and targets, got {} and {}", N, tokens.size(),
                            targets.size()));
  std::copy(tokens.begin(), tokens.end(), tokens_.begin());
  std::copy(targets.begin(), targets.end(), targets_.begin());
  have_forward_ = false;
  const double loss = walk_profiled(*ops_, profile_, "forward", [&](Ops& ops) { return walk_forward(ops, L_); });
  have_forward_ = true;
  return loss;
}

template <class T>
std::vector<float> Transformer<T>::logits(std::int64_t row) const {
  KTUNE_REQUIRE(have_forward_, "logits are a forward's, and no forward ran since the last backward");
  KTUNE_REQUIRE(row >= 0 && row < shape_.tokens(),
                fmt::format("token {} of a batch of {} tokens", row, shape_.tokens()));
  const T* first = final_acts_.data() + L_.final.logits + row * config_.vocab;
  return std::vector<float>(first, first + config_.vocab);
}

template <class T>
std::vector<float> Transformer<T>::token_losses() const {
  KTUNE_REQUIRE(have_forward_, "losses are a forward's, and no forward ran since the last backward");
  const T* first = final_acts_.data() + L_.final.losses;
  return std::vector<float>(first, first + shape_.tokens());
}

template <class T>
void Transformer<T>::backward(bool accumulate) {
  KTUNE_REQUIRE(L_.train, "backward needs a model built for gradients, not forward-only");
  KTUNE_REQUIRE(have_forward_, "backward needs a forward pass first");
  have_forward_ = false;  // the backward overwrites the logits
  walk_profiled(*ops_, profile_, "backward", [&](Ops& ops) { walk_backward(ops, L_, accumulate); });
}

template <class T>
void Transformer<T>::step(const templates::adamw::AdamwHyper& hyper) {
  KTUNE_REQUIRE(L_.optimizer, "an optimizer step needs a model built for training");
  allocate_moments();
  templates::adamw::AdamwHyper h = hyper;
  h.step = ++steps_;
  walk_profiled(*ops_, profile_, "optimizer", [&](Ops& ops) { walk_adamw(ops, L_, h); });
}

void OptimizerState::require_fits(std::int64_t parameters) const {
  KTUNE_REQUIRE(static_cast<std::int64_t>(exp_avg.size()) == parameters &&
                    static_cast<std::int64_t>(exp_avg_sq.size()) == parameters && steps >= 0,
                fmt::format("optimizer state for {} and {} values after {} steps; the model has {} parameters",
                            exp_avg.size(), exp_avg_sq.size(), steps, parameters));
}

template <class T>
void Transformer<T>::allocate_moments() {
  if (!exp_avg_.empty()) return;  // the moments exist from the first step on, as the plan's peak_step counts them
  exp_avg_.assign(L_.params.total, T(0));
  exp_avg_sq_.assign(L_.params.total, T(0));
  bases_[static_cast<int>(Region::kExpAvg)] = exp_avg_.data();
  bases_[static_cast<int>(Region::kExpAvgSq)] = exp_avg_sq_.data();
  ops_ = std::make_unique<CpuOps<T>>(bases_, L_.work, parallel_);  // holds no state but the bases
}

template <class T>
OptimizerState Transformer<T>::optimizer_state() const {
  KTUNE_REQUIRE(L_.optimizer, "only a model built for training has optimizer state");
  OptimizerState state;
  state.steps = steps_;
  state.exp_avg.assign(exp_avg_.begin(), exp_avg_.end());
  state.exp_avg_sq.assign(exp_avg_sq_.begin(), exp_avg_sq_.end());
  state.exp_avg.resize(L_.params.total, 0.0f);  // zeros before the first step
  state.exp_avg_sq.resize(L_.params.total, 0.0f);
  return state;
}

template <class T>
void Transformer<T>::set_optimizer_state(const OptimizerState& state) {
  KTUNE_REQUIRE(L_.optimizer, "only a model built for training has optimizer state");
  state.require_fits(L_.params.total);
  allocate_moments();
  std::copy(state.exp_avg.begin(), state.exp_avg.end(), exp_avg_.begin());
  std::copy(state.exp_avg_sq.begin(), state.exp_avg_sq.end(), exp_avg_sq_.begin());
  steps_ = state.steps;
}

template <class T>
std::int64_t Transformer<T>::allocated_bytes() const {
  const std::size_t values = params_.size() + grads_.size() + exp_avg_.size() + exp_avg_sq_.size() +
                             layer_acts_.size() + final_acts_.size() + work_.size();
  return static_cast<std::int64_t>(values * sizeof(T) + (tokens_.size() + targets_.size()) * sizeof(std::int32_t));
}

template class Transformer<float>;
template class Transformer<double>;

}  // namespace ktune::model
