// The Transformer on a device backend (see device_model.hpp).
#include "model/device_model.hpp"

#include <fmt/format.h>

#include <utility>

#include "base/error.hpp"
#include "model/nvtx.hpp"
#include "templates/render.hpp"

namespace ktune::model {

DeviceTransformer::DeviceTransformer(tuner::exec::Backend& backend, const ModelConfig& config, const RunShape& shape,
                                     Allocation allocation, const DeviceOptions& options)
    : backend_(backend),
      L_(device_layout(config, shape, allocation, options)),
      graphs_(options.graphs) {
  KTUNE_REQUIRE(!graphs_ || options.mode == Mode::kCompiled,
                "graphs capture compiled mode's step; eager mode launches kernel by kernel, as PyTorch eager does");
  ops_ = std::make_unique<DeviceOps>(backend_, L_, options);
  ops_->poison();
  walk_init(*ops_, L_);
  init_parameters(0);
  if (L_.optimizer) {
    const std::vector<float> zeros(static_cast<std::size_t>(L_.params.total), 0.0f);
    ops_->upload({Region::kExpAvg, 0}, zeros.data(), zeros.size() * sizeof(float));
    ops_->upload({Region::kExpAvgSq, 0}, zeros.data(), zeros.size() * sizeof(float));
  }
}

void DeviceTransformer::set_parameters(std::span<const float> values) {
  KTUNE_REQUIRE(static_cast<std::int64_t>(values.size()) == L_.params.total,
                fmt::format("the model has {} parameters, got {} values", L_.params.total, values.size()));
  ops_->upload({Region::kParams, 0}, values.data(), values.size_bytes());
  if (L_.precision == Precision::kBf16) {  // the GEMMs' copy, rounded here as AdamW's kernels round it
    std::vector<std::uint16_t> copy(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) copy[i] = templates::float_to_bf16_bits(values[i]);
    ops_->upload({Region::kWeightsBf16, 0}, copy.data(), copy.size() * sizeof(std::uint16_t));
  }
}

std::vector<float> DeviceTransformer::parameters() {
  std::vector<float> out(static_cast<std::size_t>(L_.params.total));
  ops_->download(out.data(), {Region::kParams, 0}, out.size() * sizeof(float));
  return out;
}

std::vector<std::uint16_t> DeviceTransformer::weight_copy() {
  KTUNE_REQUIRE(L_.precision == Precision::kBf16, "only a bf16 run keeps a bf16 copy of the weights");
  std::vector<std::uint16_t> out(static_cast<std::size_t>(L_.params.total));
  ops_->download(out.data(), {Region::kWeightsBf16, 0}, out.size() * sizeof(std::uint16_t));
  return out;
}

void DeviceTransformer::set_gradients(std::span<const float> values) {
  KTUNE_REQUIRE(L_.train, "a forward-only model has no gradients");
  KTUNE_REQUIRE(static_cast<std::int64_t>(values.size()) == L_.params.total,
                fmt::format("the model has {} parameters, got {} gradients", L_.params.total, values.size()));
  ops_->upload({Region::kGrads, 0}, values.data(), values.size_bytes());
}

std::vector<float> DeviceTransformer::gradients() {
  KTUNE_REQUIRE(L_.train, "a forward-only model has no gradients");
  std::vector<float> out(static_cast<std::size_t>(L_.params.total));
  ops_->download(out.data(), {Region::kGrads, 0}, out.size() * sizeof(float));
  return out;
}

OptimizerState DeviceTransformer::optimizer_state() {
  KTUNE_REQUIRE(L_.optimizer, "only a model built for training has optimizer state");
  const auto n = static_cast<std::size_t>(L_.params.total);
  OptimizerState state{std::vector<float>(n), std::vector<float>(n), steps_};
  ops_->download(state.exp_avg.data(), {Region::kExpAvg, 0}, n * sizeof(float));
  ops_->download(state.exp_avg_sq.data(), {Region::kExpAvgSq, 0}, n * sizeof(float));
  return state;
}

void DeviceTransformer::set_optimizer_state(const OptimizerState& state) {
  KTUNE_REQUIRE(L_.optimizer, "only a model built for training has optimizer state");
  state.require_fits(L_.params.total);
  ops_->upload({Region::kExpAvg, 0}, state.exp_avg.data(), state.exp_avg.size() * sizeof(float));
  ops_->upload({Region::kExpAvgSq, 0}, state.exp_avg_sq.data(), state.exp_avg_sq.size() * sizeof(float));
  steps_ = state.steps;
}

void DeviceTransformer::init_parameters(std::uint64_t seed) {
  std::vector<float> host(static_cast<std::size_t>(L_.params.total));
  model::init_parameters<float>(L_.params, host.data(), seed);
  set_parameters(host);
}

double DeviceTransformer::forward(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets) {
  const std::int64_t N = L_.shape.tokens();
  KTUNE_REQUIRE(static_cast<std::int64_t>(tokens.size()) == N && static_cast<std::int64_t>(targets.size()) == N,
                fmt::format("forward needs batch*context = {} tokens and targets, got {} and {}", N, tokens.size(),
                            targets.size()));
  for (const auto* list : {&tokens, &targets})
    for (const std::int32_t t : *list)
      KTUNE_REQUIRE(t >= 0 && t < L_.config.vocab,
                    fmt::format("token id {} is outside the vocabulary [0, {})", t, L_.config.vocab));
  ops_->upload({Region::kTokens, 0}, tokens.data(), tokens.size_bytes());
  ops_->upload({Region::kTargets, 0}, targets.data(), targets.size_bytes());
  have_forward_ = false;
  run_pass(forward_, "forward", [&](Ops& ops) { walk_forward_ops(ops, L_); });
  const double loss = walk_profiled(*ops_, profile_, "forward", [&](Ops& ops) { return walk_loss(ops, L_); });
  have_forward_ = true;
  return loss;
}

std::vector<float> DeviceTransformer::logits(std::int64_t row) {
  KTUNE_REQUIRE(have_forward_, "logits are a forward's, and no forward ran since the last backward");
  KTUNE_REQUIRE(row >= 0 && row < L_.shape.tokens(),
                fmt::format("token {} of a batch of {} tokens", row, L_.shape.tokens()));
  const auto V = static_cast<std::size_t>(L_.config.vocab);
  const Ref at{Region::kFinal, L_.final.logits + row * L_.config.vocab};  // in the layout's units: bf16 ones in bf16
  std::vector<float> out(V);
  if (L_.precision != Precision::kBf16) {
    ops_->download(out.data(), at, V * sizeof(float));
    return out;
  }
  std::vector<std::uint16_t> bits(V);
  ops_->download(bits.data(), at, V * sizeof(std::uint16_t));
  for (std::size_t i = 0; i < V; ++i) out[i] = templates::bf16_bits_to_float(bits[i]);
  return out;
}

std::vector<float> DeviceTransformer::token_losses() {
  KTUNE_REQUIRE(have_forward_, "losses are a forward's, and no forward ran since the last backward");
  std::vector<float> out(static_cast<std::size_t>(L_.shape.tokens()));
  ops_->download(out.data(), {Region::kFinal, L_.final.losses}, out.size() * sizeof(float));
  return out;
}

void DeviceTransformer::backward(bool accumulate) {
  KTUNE_REQUIRE(L_.train, "backward needs a model built for gradients, not forward-only");
  KTUNE_REQUIRE(have_forward_, "backward needs a forward pass first");
  have_forward_ = false;  // the backward overwrites the logits
  run_pass(backward_[accumulate ? 1 : 0], "backward", [&](Ops& ops) { walk_backward(ops, L_, accumulate); });
}

void DeviceTransformer::run_pass(Pass& pass, const char* phase, const std::function<void(Ops&)>& walk) {
  if (profile_ || !graphs_ || (!pass.graph && !std::exchange(pass.warmed, true))) {
    walk_profiled(*ops_, profile_, phase, walk);
    return;
  }
  if (!pass.graph) {
    const LaunchCount before = ops_->launches();
    pass.graph = backend_.capture([&] { walk(*ops_); });
    pass.launches = ops_->launches().since(before);
    ops_->set_launches(before);
  }
  const NvtxRange range([&] { return std::string(phase) + " (graph)"; });
  backend_.replay(*pass.graph);
  ops_->add_launches(pass.launches);
}

void DeviceTransformer::step(const templates::adamw::AdamwHyper& hyper) {
  KTUNE_REQUIRE(L_.optimizer, "an optimizer step needs a model built for training");
  templates::adamw::AdamwHyper h = hyper;
  h.step = ++steps_;
  walk_profiled(*ops_, profile_, "optimizer", [&](Ops& ops) { walk_adamw(ops, L_, h); });
}

void DeviceTransformer::synchronize() { backend_.synchronize(); }

}  // namespace ktune::model
