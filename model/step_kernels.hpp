// What one training step of the Transformer LM needs from the kernel
// families: the (family, problem) pairs for a model, a run shape and a
// precision. `ktune tune --model` tunes exactly this list and the runtime
// loads exactly this list (tuner/tuned_kernels.hpp).
#pragma once
#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/precision.hpp"
#include "templates/attention/reference.hpp"
#include "tuner/session/tuned_kernels.hpp"

namespace ktune::model {

/// How a step launches RoPE on q and k (and on dq and dk).
enum class RopeLaunch {
  kEach,    ///< one launch each: N tokens of H heads
  kPaired,  ///< one over 2 N tokens, k's right after q's (StepLayout::paired_rope)
  kFused,   ///< one over N tokens of 2 H heads, a fused projection's rows (StepLayout::fused_qkv)
};

/// The families' problems of one forward + backward + AdamW step, each once,
/// in the order the step first uses them, with the dtypes the step launches:
/// problem_dtype(precision) ("f32" for f32 and tf32; "bf16": bf16
/// activations with fp32 weights, statistics and optimizer state).
/// Attention is flash attention (attention_fwd, attention_bwd) when
/// `attention` keeps the log-sum-exp, else materialised: the softmax pair
/// over attention_scores_problem (its GEMMs are not families). The residual
/// adds run fused with the RMSNorm beside them (residual_rmsnorm_fwd and
/// _bwd); rmsnorm_fwd is left for the first block's norm, rmsnorm_bwd for
/// the final norm's backward. GEMMs are not listed. grad_norm (the step's
/// clip-by-norm, over grad_norm_problem, not in place: the fused AdamW
/// applies the factor) is listed whether or not a run clips. AdamW's
/// problem is adamw_problem's. RoPE's problem is as `rope` launches it.
/// A shape of several micro-batches a step adds the primitive add
/// (prim_add) over a norm's and the embedding's gradients (accumulate_problem).
std::vector<tuner::KernelRequest> step_kernels(const ModelConfig& config, const RunShape& shape, Precision precision,
                                               AttentionSaved attention, RopeLaunch rope);
/// How compiled mode launches RoPE: over a fused projection's rows where the
/// layout allows (qkv_fusable), else paired where it allows
/// (rope_pairs_adjacent), else one launch each.
RopeLaunch compiled_rope_launch(const ModelConfig& config, const RunShape& shape, Precision precision,
                                AttentionSaved attention);
/// The list compiled mode runs: attention as attention_saved(precision,
/// compiled), RoPE as compiled_rope_launch says.
std::vector<tuner::KernelRequest> step_kernels(const ModelConfig& config, const RunShape& shape, Precision precision);

/// The global gradient norm as the step tunes and looks it up: dtype f32
/// (gradients are fp32 in every precision), tensors of the model's mean
/// size, at most kAdamwTunedElements elements in all, as adamw_problem's
/// (the kernel streams the gradients at the memory's bandwidth just as
/// AdamW does). The model's largest tensor times its tensor count would be
/// a 26 GiB tuning workload at the xl size, over 100 GiB of host memory to
/// make.
/// It stands for the step's tensors, not their sizes: the runtime sizes the
/// partials from the model's tensors (grad_norm::partial_floats).
/// `in_place`: the gradients scaled by the clip factor (for an AdamW that
/// does not clip, eager's), else the norm and the factor only.
templates::Problem grad_norm_problem(const ModelConfig& config, bool in_place);

/// A gradient accumulation's add of n fp32 values (Ops::accumulate): y += x
/// as prim_add over one row of n, the addend of the same shape.
templates::Problem accumulate_problem(std::int64_t n);

/// AdamW's problem, as the step tunes and launches it: parameter tensors of
/// equal size (the model's total count over its tensor count, rounded up),
/// at most kAdamwTunedElements elements in all (fewer tensors past it). The
/// fused kernel streams its five arrays at the memory's bandwidth once they
/// are far larger than the L2 cache, so its time is linear in the count past
/// that size and the best config does not change; capped, a tuning
/// workload at the 2.7B size needs 4 GiB of host memory and seconds to make
/// instead of 100 GiB and minutes.
templates::Problem adamw_problem(const ModelConfig& config, Precision precision);
/// 2^27 elements: 512 MiB per fp32 array, ten times an H100's L2 cache.
inline constexpr std::int64_t kAdamwTunedElements = std::int64_t{1} << 27;

/// Materialised attention's softmax problem: the scores of every (batch,
/// head) as stacked (S, S) blocks, causal when the shape is.
templates::Problem attention_scores_problem(const templates::attention::AttentionShape& s, const std::string& dtype);
/// Flash attention's problem (attention_fwd and attention_bwd); f32
/// multiplies in tf32.
templates::Problem flash_attention_problem(const templates::attention::AttentionShape& s, const std::string& dtype);

}  // namespace ktune::model
