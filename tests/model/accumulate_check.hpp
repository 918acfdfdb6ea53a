// Gradient accumulation's check on any backend: a runtime built for K
// micro-batches a step, given one batch of K x B windows a micro-batch (B
// windows) at a time, against a cpu runtime given the K x B windows at once.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "model/runtime.hpp"

namespace ktune::test {

struct AccumulatedStep {
  double loss = 0;           ///< the mean of the micro-batches' losses
  std::vector<float> grads;  ///< after the last micro-batch's backward
};

/// Runs `tokens` and `targets` ((K x batch, context) each, K =
/// shape.micro_batches) through `rt` a micro-batch at a time, the first
/// backward writing the gradients and the others adding to them.
inline AccumulatedStep accumulate_step(model::Runtime& rt, const model::RunShape& shape,
                                       std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets) {
  AccumulatedStep out;
  const auto n = static_cast<std::size_t>(shape.tokens());
  for (std::int64_t k = 0; k < shape.micro_batches; ++k) {
    const auto at = static_cast<std::size_t>(k) * n;
    out.loss += rt.forward(tokens.subspan(at, n), targets.subspan(at, n)) / static_cast<double>(shape.micro_batches);
    rt.backward(k > 0);
  }
  out.grads = rt.gradients();
  return out;
}

/// The same windows as one batch on the cpu backend (2 threads).
inline AccumulatedStep whole_batch_step(const model::ModelConfig& config, const model::RunShape& shape,
                                        std::span<const float> params, std::span<const std::int32_t> tokens,
                                        std::span<const std::int32_t> targets) {
  model::BackendOptions cpu;
  cpu.threads = 2;
  auto rt = model::make_runtime(config, model::RunShape{shape.micro_batches * shape.batch, shape.context},
                                model::Allocation::kTrain, cpu);
  rt->set_parameters(params);
  AccumulatedStep out;
  out.loss = rt->forward(tokens, targets);
  rt->backward();
  out.grads = rt->gradients();
  return out;
}

}  // namespace ktune::test
