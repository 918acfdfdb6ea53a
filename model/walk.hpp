// The Transformer LM's training step written once, as a sequence of ops over
// the regions of the static memory plan (model/ops/ops.hpp): forward,
// backward, AdamW. Every backend runs this same walk; a backend or mode
// changes how an op runs, never which ops run.
#pragma once
#include <cstdint>
#include <vector>

#include "model/config.hpp"
#include "model/memory_plan.hpp"
#include "model/ops/ops.hpp"
#include "model/parameters.hpp"

namespace ktune::model {

/// Where every buffer of a run lives: the plan's layouts of each region.
struct StepLayout {
  ModelConfig config;
  RunShape shape;
  bool train = true;  ///< every block keeps its activations slot, and gradients (else one slot, reused)
  bool optimizer = true;  ///< AdamW's moments (Allocation::kTrain; a step needs them)
  Precision precision = Precision::kF32;                  ///< the run's numerics (device backends)
  AttentionSaved attention = AttentionSaved::kProbabilities;  ///< materialised or flash attention
  /// The projections that read one input — q, k and v of ln1; W1 and W3 of
  /// ln2 — and their weights' gradients as one GEMM batched over the weights
  /// (the input's batch stride 0), not one GEMM each: fewer, fuller waves of
  /// tiles on a GPU. Compiled mode on a device backend; the same math.
  bool batched_projections = false;
  /// RoPE of q and k (and of dq and dk) as one launch over 2N tokens, where
  /// the layout has them back to back (rope_pairs_adjacent), not one each.
  /// Compiled mode on a device backend; the same math.
  bool paired_rope = false;
  /// q, k and v as one projection's (N, 3 C) rows, [q | k | v] per token,
  /// where the layout allows (qkv_fusable): one GEMM of the three weights
  /// (stacked, 3 C x C), one RoPE launch over q and k side by side in each
  /// row (2 H heads, rows 3 C apart), flash attention on the strided views;
  /// and backward, dq, dk, dv written into such rows, so dX is one GEMM with
  /// K = 3 C, not three accumulating ones. Compiled mode on a device backend
  /// with flash attention; the same math.
  bool fused_qkv = false;
  ParameterLayout params;
  LayerLayout layer;
  FinalLayout final;
  WorkspaceLayout work;

  /// A parameter as the GEMMs and the embedding read it: in bf16 its bf16
  /// copy (kWeightsBf16, refreshed by AdamW), else the parameter itself.
  Ref weight(std::int64_t offset) const {
    return {precision == Precision::kBf16 ? Region::kWeightsBf16 : Region::kParams, offset};
  }
  /// Where buffer `offset` (one of `layer`'s) of block l lies. Training
  /// keeps a slot per block; recomputing (shape.recompute), each block's
  /// first layer.kept(shape.recompute) units lie back to back, and the rest
  /// of a slot after them, one for all blocks, written again before each
  /// block's backward. Forward-only runs reuse one slot.
  Ref act(std::int64_t l, std::int64_t offset) const {
    if (!train) return {Region::kLayers, offset};
    const std::int64_t kept = layer.kept(shape.recompute);
    return {Region::kLayers, (offset < kept ? l : config.layers - 1) * kept + offset};
  }
  /// Elements of each region (tokens and targets count int32 values; the
  /// activation regions of a bf16 layout count its 2-byte units).
  std::int64_t region_elements(Region r) const;
  /// The attention problem of one block.
  templates::attention::AttentionShape attention_shape() const;
};

/// Layouts for (config, shape); `threads` sizes the cpu backend's per-thread
/// scratch (1 for a device backend); `attention` says what each block keeps
/// for the attention backward.
StepLayout step_layout(const ModelConfig& config, const RunShape& shape, unsigned threads, Allocation allocation,
                       Precision precision = Precision::kF32,
                       AttentionSaved attention = AttentionSaved::kProbabilities);

/// Fills the constant tables (RoPE) of the workspace; once per run.
void walk_init(Ops& ops, const StepLayout& L);
/// Forward over the tokens and targets already in their regions; returns the
/// mean loss: walk_forward_ops, then walk_loss.
double walk_forward(Ops& ops, const StepLayout& L);
/// The forward's ops, up to the per-token losses; nothing waits for them.
void walk_forward_ops(Ops& ops, const StepLayout& L);
/// The mean of the per-token losses the forward's ops wrote (reads them back).
double walk_loss(Ops& ops, const StepLayout& L);
/// Gradients of the last forward's loss, its mean over the step's tokens
/// (its batch's mean over L.shape.micro_batches): written over the
/// gradients, or added to them with `accumulate` (a step's micro-batches
/// after its first; needs micro_batches > 1). Needs train.
void walk_backward(Ops& ops, const StepLayout& L, bool accumulate = false);
/// The parameter tensors as AdamW operands, in state-dict order.
std::vector<AdamwTensor> adamw_tensors(const StepLayout& L);
/// One AdamW step over every parameter tensor.
void walk_adamw(Ops& ops, const StepLayout& L, const templates::adamw::AdamwHyper& hyper);

}  // namespace ktune::model
