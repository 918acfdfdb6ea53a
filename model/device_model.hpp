// The Transformer LM on a device backend (cuda or emu): the run's memory and
// kernels are DeviceOps' (model/ops/device_ops.hpp), the step is the one walk
// (model/walk.hpp) — the same the cpu backend runs. Parameters start at the
// CS336 initialisation (seed 0), computed on the host and uploaded; every
// other byte starts poisoned (NaN), so an op that reads what nothing wrote
// shows.
//
// With DeviceOptions::graphs (compiled mode), the forward's ops (up to the
// per-token losses) and the backward's are each captured as a graph on their
// second run — the first compiles, plans the eager chains and chooses the
// GEMM algorithms — and replayed from then on: one launch a pass instead of
// hundreds, with the same kernels, arguments and addresses. The tokens and
// targets are uploaded before, the loss read after; AdamW's launches, whose
// arguments change with the step, run as before. A profiled pass runs op by
// op, uncaptured.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "model/ops/device_ops.hpp"
#include "model/ops/profiled_ops.hpp"
#include "model/transformer.hpp"

namespace ktune::model {

class DeviceTransformer {
 public:
  DeviceTransformer(tuner::exec::Backend& backend, const ModelConfig& config, const RunShape& shape,
                    Allocation allocation, const DeviceOptions& options);

  const StepLayout& layout() const { return L_; }
  DeviceOps& ops() { return *ops_; }

  /// Host <-> device copies of the flat parameter (or gradient) buffer,
  /// layout().params.total floats in state-dict layout. In bf16 these are
  /// the fp32 master weights; setting them refreshes their bf16 copy.
  void set_parameters(std::span<const float> values);
  std::vector<float> parameters();
  /// bf16 runs: the weights' bf16 copy the GEMMs read (bf16 bits, state-dict
  /// layout), as AdamW or set_parameters last wrote it.
  std::vector<std::uint16_t> weight_copy();
  void set_gradients(std::span<const float> values);
  std::vector<float> gradients();
  /// AdamW's moments and steps taken (OptimizerState; the moments are zero
  /// at construction); setting them is what a resumed run does. Needs
  /// Allocation::kTrain.
  OptimizerState optimizer_state();
  void set_optimizer_state(const OptimizerState& state);
  /// The global L2 norm of the gradients the last step clipped by, before
  /// clipping (DeviceOps::clipped_norm).
  std::optional<double> grad_norm() { return ops_->clipped_norm(); }
  void init_parameters(std::uint64_t seed);

  /// Mean cross-entropy of tokens against targets, both (batch, context) int32.
  double forward(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets);
  /// The logits (vocab values) the last forward computed for token `row`
  /// of its batch, as fp32 (bf16 runs keep them in bf16: exact widened).
  std::vector<float> logits(std::int64_t row);
  /// The per-token losses of the last forward (fp32 in every precision).
  std::vector<float> token_losses();
  /// Gradients of the last forward's loss, written or with `accumulate`
  /// added (walk_backward); needs Allocation::kGradients or kTrain and a forward.
  void backward(bool accumulate = false);
  /// One AdamW step from the gradients (state zero at construction).
  void step(const templates::adamw::AdamwHyper& hyper);
  std::int64_t steps_taken() const { return steps_; }
  /// Times every op of the passes that follow into `profile` (nullptr: none).
  void set_profile(OpProfile* profile) { profile_ = profile; }
  /// Waits for everything enqueued.
  void synchronize();
  /// Whether the passes are replayed as graphs (DeviceOptions::graphs).
  bool graphs() const { return graphs_; }
  /// Nodes of the forward's and the backward's graphs; 0 before a capture
  /// (or without DeviceOptions::graphs).
  std::size_t forward_graph_nodes() const { return forward_.graph ? forward_.graph->nodes() : 0; }
  std::size_t backward_graph_nodes() const { return backward_[0].graph ? backward_[0].graph->nodes() : 0; }
  /// Whether a forward has run (with graphs: the next one is captured).
  bool forward_ran() const { return forward_.warmed || forward_.graph; }

 private:
  // One pass's graph, and the launches its capture enqueued.
  struct Pass {
    bool warmed = false;  // run op by op once
    std::unique_ptr<tuner::exec::Graph> graph;
    LaunchCount launches;
  };
  // Runs `walk` as one pass: op by op (profiled, without graphs, or the
  // first run), else as the pass's graph, captured on its second run.
  void run_pass(Pass& pass, const char* phase, const std::function<void(Ops&)>& walk);

  tuner::exec::Backend& backend_;
  StepLayout L_;
  std::unique_ptr<DeviceOps> ops_;
  OpProfile* profile_ = nullptr;
  bool graphs_ = false;
  Pass forward_;
  std::array<Pass, 2> backward_;  // writing the gradients, adding to them (another pass: other betas, targets)
  bool have_forward_ = false;
  std::int64_t steps_ = 0;
};

}  // namespace ktune::model
