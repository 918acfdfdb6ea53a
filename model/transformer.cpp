// Transformer construction, buffers and parameter access (the passes are in
// transformer_forward.cpp and transformer_backward.cpp).
#include "model/transformer.hpp"

#include <fmt/format.h>

#include "base/error.hpp"
#include "model/gemm.hpp"
#include "templates/rope/reference.hpp"

namespace ktune::model {

template <class T>
Transformer<T>::Transformer(const ModelConfig& config, const RunShape& shape, Allocation allocation, unsigned threads)
    : config_(config), shape_(shape), allocation_(allocation), parallel_(threads) {
  config_.validate();
  shape_.validate();
  const bool train = allocation_ == Allocation::kTrain;
  layout_ = parameter_layout(config_);
  plan_ = plan_memory(config_, shape_, parallel_.threads(), sizeof(T));
  ll_ = layer_layout(config_, shape_);
  fl_ = final_layout(config_, shape_);
  wl_ = workspace_layout(config_, shape_, parallel_.threads(), train);
  params_.assign(layout_.total, T(0));
  if (train) grads_.assign(layout_.total, T(0));
  layer_acts_.assign((train ? config_.layers : 1) * ll_.size, T(0));
  final_acts_.assign(fl_.size, T(0));
  work_.assign(wl_.size, T(0));
  tokens_.assign(shape_.tokens(), 0);
  targets_.assign(shape_.tokens(), 0);
  templates::rope::rope_tables<T>(shape_.context, config_.head_dim(), config_.rope_theta, work_.data() + wl_.rope_cos,
                                  work_.data() + wl_.rope_sin);
  set_gemm_threads(parallel_.threads());
  init_parameters(0);
}

template <class T>
Transformer<T>::~Transformer() = default;

template <class T>
std::span<T> Transformer<T>::parameter(const std::string& name) {
  const auto& info = layout_.find(name);
  return std::span<T>(params_).subspan(info.offset, info.numel);
}

template <class T>
std::span<T> Transformer<T>::gradient(const std::string& name) {
  KTUNE_REQUIRE(allocation_ == Allocation::kTrain, "a forward-only model has no gradients");
  const auto& info = layout_.find(name);
  return std::span<T>(grads_).subspan(info.offset, info.numel);
}

template <class T>
void Transformer<T>::init_parameters(std::uint64_t seed) {
  model::init_parameters<T>(layout_, params_.data(), seed);
}

template <class T>
T* Transformer<T>::act(std::int64_t layer) {
  return layer_acts_.data() + (allocation_ == Allocation::kTrain ? layer : 0) * ll_.size;
}

template <class T>
std::int64_t Transformer<T>::allocated_bytes() const {
  const std::size_t values = params_.size() + grads_.size() + layer_acts_.size() + final_acts_.size() + work_.size();
  return static_cast<std::int64_t>(values * sizeof(T) + (tokens_.size() + targets_.size()) * sizeof(std::int32_t));
}

template class Transformer<float>;
template class Transformer<double>;

}  // namespace ktune::model
