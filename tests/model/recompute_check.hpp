// Activation recomputation's check on any backend: two runtimes of one
// model, one keeping every block's activations and one recomputing some
// (RunShape::recompute), given the same parameters and batches, steps of
// forward, backward (micro-batches included) and AdamW; what each saw.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "model/accumulate_check.hpp"
#include "model/device_check.hpp"
#include "model/parameters.hpp"
#include "model/runtime.hpp"

namespace ktune::test {

struct RecomputeRun {
  std::vector<double> losses;                  ///< each step's (its micro-batches' mean)
  std::vector<std::vector<float>> gradients;   ///< each step's, before its AdamW update
  std::vector<float> parameters;               ///< after the last step
};

/// `steps` steps of `shape` (its recompute flag as given) on `options`'
/// backend, from parameters seeded `seed`, batches seeded `seed` + step,
/// AdamW with clipping between steps.
inline RecomputeRun recompute_run(const model::ModelConfig& config, const model::RunShape& shape,
                                  const model::BackendOptions& options, int steps, std::uint64_t seed) {
  auto rt = model::make_runtime(config, shape, model::Allocation::kTrain, options);
  std::vector<float> params(static_cast<std::size_t>(rt->layout().total));
  model::init_parameters<float>(rt->layout(), params.data(), seed);
  rt->set_parameters(params);
  templates::adamw::AdamwHyper hyper;
  hyper.lr = 1e-2f;
  hyper.max_grad_norm = 1.0f;
  RecomputeRun out;
  for (int s = 0; s < steps; ++s) {
    std::vector<std::int32_t> tokens, targets;
    random_tokens(shape.step_tokens(), config.vocab, seed + 1 + static_cast<std::uint64_t>(s), tokens, targets);
    const AccumulatedStep step = accumulate_step(*rt, shape, tokens, targets);
    out.losses.push_back(step.loss);
    out.gradients.push_back(step.grads);
    rt->step(hyper);
  }
  out.parameters = rt->parameters();
  return out;
}

/// The same run keeping every activation and recomputing at `level`.
inline std::pair<RecomputeRun, RecomputeRun> recompute_pair(const model::ModelConfig& config,
                                                            model::RunShape shape,
                                                            const model::BackendOptions& options, int steps,
                                                            std::uint64_t seed, model::Recompute level) {
  shape.recompute = model::Recompute::kNone;
  RecomputeRun kept = recompute_run(config, shape, options, steps, seed);
  shape.recompute = level;
  RecomputeRun recomputed = recompute_run(config, shape, options, steps, seed);
  return {std::move(kept), std::move(recomputed)};
}

}  // namespace ktune::test
