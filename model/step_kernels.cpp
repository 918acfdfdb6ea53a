#include "model/step_kernels.hpp"

#include <algorithm>

#include "base/error.hpp"
#include "model/memory_plan.hpp"
#include "model/parameters.hpp"

namespace ktune::model {

templates::Problem attention_scores_problem(const templates::attention::AttentionShape& s, const std::string& dtype) {
  return {dtype, {{"rows", s.batch * s.heads * s.seq}, {"cols", s.seq}, {"causal", s.causal ? 1 : 0}}};
}

templates::Problem flash_attention_problem(const templates::attention::AttentionShape& s, const std::string& dtype) {
  return {dtype, {{"batch", s.batch}, {"heads", s.heads}, {"seq", s.seq}, {"head_dim", s.head_dim},
                  {"causal", s.causal ? 1 : 0}}};
}

namespace {

// The dims of `dtype` equal tensors of the model's mean size (its total
// count over its tensor count, rounded up), as many as fit in
// kAdamwTunedElements (at least one, at most the model's).
templates::Problem mean_tensors_problem(const ModelConfig& config, const std::string& dtype) {
  const auto tensors = static_cast<std::int64_t>(parameter_layout(config).tensors.size());
  const std::int64_t numel = (config.parameter_count() + tensors - 1) / tensors;
  const std::int64_t tuned = std::clamp<std::int64_t>(kAdamwTunedElements / numel, 1, tensors);
  return {dtype, {{"tensors", tuned}, {"numel", numel}}};
}

}  // namespace

templates::Problem grad_norm_problem(const ModelConfig& config, bool in_place) {
  templates::Problem p = mean_tensors_problem(config, "f32");
  p.dims["in_place"] = in_place ? 1 : 0;
  return p;
}

templates::Problem accumulate_problem(std::int64_t n) {
  return {"f32", {{"rows", 1}, {"cols", n}, {"b_rows", 1}, {"b_cols", n}}};
}

templates::Problem adamw_problem(const ModelConfig& config, Precision precision) {
  return mean_tensors_problem(config, problem_dtype(precision));
}

std::vector<tuner::KernelRequest> step_kernels(const ModelConfig& config, const RunShape& shape, Precision precision,
                                               AttentionSaved attention, RopeLaunch rope_launch) {
  config.validate();
  shape.validate();
  using templates::Problem;
  const std::string dtype = problem_dtype(precision);
  const std::int64_t tokens = shape.tokens();
  const Problem embed{dtype, {{"rows", tokens}, {"dim", config.d_model}, {"vocab", config.vocab}}};
  const Problem norm{dtype, {{"rows", tokens}, {"dim", config.d_model}}};
  const Problem rope{dtype,
                     {{"head_dim", config.head_dim()},
                      {"heads", rope_launch == RopeLaunch::kFused ? 2 * config.heads : config.heads},
                      {"seq", shape.context},
                      {"tokens", rope_launch == RopeLaunch::kPaired ? 2 * tokens : tokens}}};
  // Flash attention reads q, k, v straight out of the projections; f32 runs on the tf32 matrix units.
  const templates::attention::AttentionShape attention_shape{shape.batch, shape.context, config.heads,
                                                             config.head_dim(), true};
  const Problem flash = flash_attention_problem(attention_shape, dtype);
  const Problem scores = attention_scores_problem(attention_shape, dtype);
  const bool is_flash = attention == AttentionSaved::kLogSumExp;
  const Problem gate{dtype, {{"n", tokens * config.d_ff}}};
  const Problem loss{dtype, {{"rows", tokens}, {"vocab", config.vocab}}};
  std::vector<tuner::KernelRequest> out;
  const auto add = [&](const char* family, const Problem& p) { out.push_back({&templates::find_family(family), p}); };
  add("embedding_fwd", embed);
  add("rmsnorm_fwd", norm);  // the first block's ln1; every other norm follows a residual add
  add("rope_fwd", rope);
  if (is_flash) add("attention_fwd", flash);
  else add("softmax_fwd", scores);
  add("residual_rmsnorm_fwd", norm);
  add("swiglu_fwd", gate);
  add("cross_entropy_fwd", loss);
  add("cross_entropy_bwd", loss);
  add("rmsnorm_bwd", norm);  // the final norm's; the blocks' norms add the stream's gradient
  add("swiglu_bwd", gate);
  add("residual_rmsnorm_bwd", norm);
  if (shape.micro_batches > 1) add("prim_add", accumulate_problem(config.d_model));  // a norm's gradient
  if (is_flash) add("attention_bwd", flash);
  else add("softmax_bwd", scores);
  add("rope_bwd", rope);
  add("embedding_bwd", embed);
  if (shape.micro_batches > 1) add("prim_add", accumulate_problem(config.vocab * config.d_model));  // the embedding's
  out.push_back({&templates::find_family("grad_norm"), grad_norm_problem(config, false)});  // AdamW clips
  add("adamw", adamw_problem(config, precision));
  return out;
}

RopeLaunch compiled_rope_launch(const ModelConfig& config, const RunShape& shape, Precision precision,
                                AttentionSaved attention) {
  if (qkv_fusable(config, shape, precision, attention)) return RopeLaunch::kFused;
  if (rope_pairs_adjacent(config, shape, precision, attention)) return RopeLaunch::kPaired;
  return RopeLaunch::kEach;
}

std::vector<tuner::KernelRequest> step_kernels(const ModelConfig& config, const RunShape& shape,
                                               Precision precision) {
  const AttentionSaved attention = attention_saved(precision, true);
  return step_kernels(config, shape, precision, attention, compiled_rope_launch(config, shape, precision, attention));
}

}  // namespace ktune::model
