// Training and evaluation loops on any backend (model/runtime.hpp), for
// `ktune train` and `ktune eval` (which only parse arguments and print).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/runtime.hpp"
#include "templates/adamw/reference.hpp"

namespace ktune::model {

/// What a run reads. Tokens come from `tokens_file` (uint16) when set, else
/// the synthetic stream.
struct RunOptions {
  ModelConfig model;
  RunShape shape{4, 32};
  unsigned threads = 1;
  BackendOptions backend;           ///< where it runs (its threads are `threads`)
  std::uint64_t seed = 0;           ///< parameter init and batch sampling
  std::string weights;              ///< safetensors to start from (empty: init)
  std::string tokens_file;          ///< uint16 tokens (empty: synthetic)
};

struct TrainOptions : RunOptions {
  std::int64_t steps = 100;
  /// AdamW, after clipping the gradients by global L2 norm 1.0 (the CS336
  /// training loop's gradient clipping; max_grad_norm 0 turns it off).
  templates::adamw::AdamwHyper hyper{3e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 1.0f};
  std::string save;                 ///< safetensors written after the last step (empty: none)
};

struct StepRecord {
  std::int64_t step = 0;  ///< from 1
  double loss = 0;        ///< loss of the batch before this step's update
  double seconds = 0;     ///< forward + backward + AdamW
  std::optional<LaunchCount> launches;  ///< what this step launched (device backends)
};

/// Trains for options.steps steps; calls on_step after each. `on_start`
/// sees the runtime once it is built (its kernel summary, say).
std::vector<StepRecord> train(const TrainOptions& options, const std::function<void(const StepRecord&)>& on_step = {},
                              const std::function<void(const Runtime&)>& on_start = {});

struct EvalResult {
  double loss = 0;
  std::vector<std::pair<std::string, double>> grad_norms;  ///< L2 norm per parameter, state-dict order
  double grad_norm_total = 0;                              ///< L2 norm of all gradients
  std::optional<LaunchCount> launches;                     ///< what the forward (+ backward) launched (device backends)
};

/// Loss on one batch (the first the sampler draws for options.seed); with
/// `gradients`, also the per-parameter gradient norms.
EvalResult evaluate(const RunOptions& options, bool gradients);

}  // namespace ktune::model
