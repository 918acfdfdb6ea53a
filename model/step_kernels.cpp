#include "model/step_kernels.hpp"

#include "base/error.hpp"
#include "model/parameters.hpp"

namespace ktune::model {

std::vector<tuner::KernelRequest> step_kernels(const ModelConfig& config, const RunShape& shape,
                                               const std::string& dtype) {
  config.validate();
  shape.validate();
  KTUNE_REQUIRE(dtype == "f32" || dtype == "bf16", "step kernels: dtype '" + dtype + "'; accepted: f32, bf16");
  using templates::Problem;
  const std::int64_t tokens = shape.tokens();
  const Problem embed{dtype, {{"rows", tokens}, {"dim", config.d_model}, {"vocab", config.vocab}}};
  const Problem norm{dtype, {{"rows", tokens}, {"dim", config.d_model}}};
  const Problem rope{dtype, {{"head_dim", config.head_dim()}, {"heads", config.heads}, {"seq", shape.context},
                             {"tokens", tokens}}};
  // Flash attention reads q, k, v straight out of the projections; f32 runs on the tf32 matrix units.
  const Problem attention{dtype, {{"batch", shape.batch}, {"heads", config.heads}, {"seq", shape.context},
                                  {"head_dim", config.head_dim()}, {"causal", 1}}};
  const Problem gate{dtype, {{"n", tokens * config.d_ff}}};
  const Problem loss{dtype, {{"rows", tokens}, {"vocab", config.vocab}}};
  const auto tensors = static_cast<std::int64_t>(parameter_layout(config).tensors.size());
  const std::int64_t numel = (config.parameter_count() + tensors - 1) / tensors;
  const Problem adam{dtype, {{"tensors", tensors}, {"numel", numel}}};
  std::vector<tuner::KernelRequest> out;
  const auto add = [&](const char* family, const Problem& p) { out.push_back({&templates::find_family(family), p}); };
  add("embedding_fwd", embed);
  add("rmsnorm_fwd", norm);
  add("rope_fwd", rope);
  add("attention_fwd", attention);
  add("swiglu_fwd", gate);
  add("cross_entropy_fwd", loss);
  add("cross_entropy_bwd", loss);
  add("swiglu_bwd", gate);
  add("attention_bwd", attention);
  add("rope_bwd", rope);
  add("rmsnorm_bwd", norm);
  add("embedding_bwd", embed);
  add("adamw", adam);
  return out;
}

}  // namespace ktune::model
