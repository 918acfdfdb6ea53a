// Model configurations of the CS336 Transformer LM: the named sizes of the
// seed reports (small ... 2.7B), `tiny` for tests, and shapes of one run.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ktune::model {

/// Architecture hyper-parameters. Context length and batch belong to the run
/// (RunShape), not the model.
struct ModelConfig {
  std::string name = "custom";
  std::int64_t vocab = 10000;
  std::int64_t d_model = 768;
  std::int64_t d_ff = 3072;
  std::int64_t layers = 12;
  std::int64_t heads = 12;
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;

  std::int64_t head_dim() const { return d_model / heads; }
  /// Throws kInvalidInput naming the field when a size is non-positive, heads
  /// does not divide d_model or the head dimension is odd (RoPE pairs).
  void validate() const;
  /// Number of parameters (all tensors, untied embedding and LM head).
  std::int64_t parameter_count() const;
  /// Floating-point operations of one training step (forward and backward)
  /// per token at `context`, as PaLM's appendix B counts them: 6 per weight
  /// of every matrix multiply (the blocks' projections and the LM head; not
  /// the embedding's lookup), plus 12 x layers x d_model x context for
  /// attention's two products (the causal mask's skipped half counted).
  double train_flops_per_token(std::int64_t context) const;
};

/// The named configurations, in the seeds' order, then `tiny`.
std::vector<std::string> model_names();

/// Configuration by name; throws kInvalidInput listing the names for anything else.
ModelConfig model_config(const std::string& name);

/// What a training run's backward computes again rather than keep
/// (activation recomputation, RunShape::recompute).
enum class Recompute {
  kNone,    ///< every block keeps every activation its backward reads
  kSwiglu,  ///< each block keeps all but the SwiGLU's output (tokens x d_ff), computed again from its two
            ///< inputs right before the block's backward: one elementwise op a block
  kBlocks,  ///< each block keeps only its input and first norm (the stream, ln1, rstd); the backward runs the
            ///< block's forward again from them, up to the SwiGLU, before its backward: about one more forward
            ///< of the blocks for one block's activations (activation checkpointing)
};
const char* to_string(Recompute recompute);  ///< "none", "swiglu", "blocks"
/// "none", "swiglu" or "blocks"; throws kInvalidInput naming them for anything else.
Recompute parse_recompute(const std::string& text);

/// Shape of one run: batch of sequences, each `context` tokens, a forward's
/// (and a backward's) worth; an optimizer step takes `micro_batches` of them
/// (gradient accumulation): the loss each backward differentiates is its
/// batch's mean over micro_batches, so the gradients summed over a step's
/// micro-batches are those of their mean loss, as one batch of
/// micro_batches x batch sequences would give, at one batch's activations.
/// `recompute` says what a training run's backward computes again rather
/// than keep; the math is the same, so are the gradients.
struct RunShape {
  std::int64_t batch = 4;
  std::int64_t context = 128;
  std::int64_t micro_batches = 1;
  Recompute recompute = Recompute::kNone;

  std::int64_t tokens() const { return batch * context; }
  /// The tokens of one optimizer step: every micro-batch's.
  std::int64_t step_tokens() const { return micro_batches * tokens(); }
  void validate() const;  ///< throws kInvalidInput unless all three are positive
};

}  // namespace ktune::model
