// The CS336 Transformer LM on the cpu backend: token embedding; `layers`
// pre-norm blocks [RMSNorm -> causal MHA with RoPE -> residual; RMSNorm ->
// SwiGLU -> residual]; final RMSNorm; untied LM head; mean cross-entropy.
// Every buffer follows the static memory plan (memory_plan.hpp) and is
// allocated once on the host; the step is the one walk (model/walk.hpp) over
// the cpu backend's ops (model/ops/cpu_ops.hpp: the families' CPU references
// split over threads, and OpenBLAS GEMMs). Templated on the value type: float
// for runs, double for gradient checks.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "model/config.hpp"
#include "model/memory_plan.hpp"
#include "model/ops/cpu_ops.hpp"
#include "model/ops/profiled_ops.hpp"
#include "model/parallel.hpp"
#include "model/parameters.hpp"
#include "model/walk.hpp"

namespace ktune::model {

/// AdamW's state, what training needs besides the parameters to go on where
/// it stopped: the moments, one value a parameter each in state-dict layout
/// (fp32 on every backend), and the steps taken (bias correction's t).
struct OptimizerState {
  std::vector<float> exp_avg, exp_avg_sq;
  std::int64_t steps = 0;

  /// Throws kInvalidInput unless it is the state of `parameters` values.
  void require_fits(std::int64_t parameters) const;
};

template <class T>
class Transformer {
 public:
  /// Allocates every buffer of the plan for (config, shape, threads).
  /// Parameters start at the CS336 initialisation with seed 0.
  Transformer(const ModelConfig& config, const RunShape& shape, Allocation allocation, unsigned threads);
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const ModelConfig& config() const { return config_; }
  const RunShape& shape() const { return shape_; }
  Allocation allocation() const { return allocation_; }
  const ParameterLayout& layout() const { return L_.params; }
  const StepLayout& step_layout() const { return L_; }
  const MemoryPlan& plan() const { return plan_; }
  unsigned threads() const { return parallel_.threads(); }
  Parallel& parallel() { return parallel_; }

  /// Flat parameter and gradient buffers, layout().total elements each
  /// (gradients are empty when forward-only).
  std::span<T> parameters() { return params_; }
  std::span<const T> parameters() const { return params_; }
  std::span<T> gradients() { return grads_; }
  std::span<const T> gradients() const { return grads_; }
  /// One tensor of the parameters or gradients, by state-dict name.
  std::span<T> parameter(const std::string& name);
  std::span<T> gradient(const std::string& name);

  /// Re-initialises the parameters (CS336 initialisation).
  void init_parameters(std::uint64_t seed);

  /// Runs the forward pass on tokens and next-token targets, both (batch,
  /// context) int32 in [0, vocab), and returns the mean cross-entropy.
  double forward(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets);

  /// The logits (vocab values) the last forward computed for token `row`
  /// of its batch (row-major over (batch, context)); a backward overwrites
  /// them. Throws kInvalidInput without a forward since, or for a row outside it.
  std::vector<float> logits(std::int64_t row) const;
  /// The per-token losses of the last forward, (batch, context), whose mean it returned.
  std::vector<float> token_losses() const;

  /// Writes the gradients of the last forward's mean loss (over the step's
  /// micro-batches, RunShape::micro_batches), over the gradients there, or
  /// with `accumulate` added to them (walk_backward). Needs
  /// Allocation::kGradients or kTrain, and a forward first.
  void backward(bool accumulate = false);

  /// One AdamW step of the walk (walk_adamw) from the gradients, with the
  /// model's own step counter (hyper.step is ignored). The first step
  /// allocates the moments (zeros). Needs Allocation::kTrain.
  void step(const templates::adamw::AdamwHyper& hyper);
  std::int64_t steps_taken() const { return steps_; }
  /// The moments (zeros before the first step) and the steps taken; setting
  /// them allocates the moments, as a step does. Needs Allocation::kTrain.
  OptimizerState optimizer_state() const;
  void set_optimizer_state(const OptimizerState& state);
  /// The global L2 norm of the gradients the last step clipped by, before
  /// clipping; nullopt before a step or after one that did not clip.
  std::optional<double> grad_norm() const { return ops_->clipped_norm(); }

  /// Times every op of the passes that follow into `profile` (nullptr: none).
  void set_profile(OpProfile* profile) { profile_ = profile; }

  /// Bytes this instance allocated (parameters, gradients, activations,
  /// workspace, inputs, and the AdamW moments once a step allocated them):
  /// equals the plan's peak for its allocation (peak_step after a step).
  std::int64_t allocated_bytes() const;

 private:
  ModelConfig config_;
  RunShape shape_;
  Allocation allocation_;
  Parallel parallel_;
  StepLayout L_;
  MemoryPlan plan_;
  std::vector<T> params_, grads_;
  std::vector<T> exp_avg_, exp_avg_sq_;  // AdamW moments, from the first step on
  std::vector<T> layer_acts_;  // (slots, L_.layer.size): slots = layers when training, else 1
  std::vector<T> final_acts_;  // (L_.final.size)
  std::vector<T> work_;        // (L_.work.size)
  std::vector<std::int32_t> tokens_, targets_;  // (batch, context) each
  std::array<void*, kRegionCount> bases_{};  // what ops_ reads each region at
  std::unique_ptr<CpuOps<T>> ops_;
  OpProfile* profile_ = nullptr;
  bool have_forward_ = false;
  std::int64_t steps_ = 0;

  void allocate_moments();
};

extern template class Transformer<float>;
extern template class Transformer<double>;

}  // namespace ktune::model
