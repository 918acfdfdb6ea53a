// What one training step of the Transformer LM needs from the kernel
// families: the (family, problem) pairs for a model, a run shape and a
// precision. `ktune tune --model` tunes exactly this list and the runtime
// loads exactly this list (tuner/tuned_kernels.hpp).
#pragma once
#include <string>
#include <vector>

#include "model/config.hpp"
#include "tuner/session/tuned_kernels.hpp"

namespace ktune::model {

/// The families' problems of one forward + backward + AdamW step, each once,
/// in the order the step first uses them. `dtype` is "f32" or "bf16" (bf16
/// activations with fp32 weights, statistics and optimizer state). GEMMs are
/// not kernel families and are not listed. AdamW is tuned as `tensors`
/// parameter tensors of equal size with the model's total parameter count
/// (rounded up), which is the fused kernel's work.
std::vector<tuner::KernelRequest> step_kernels(const ModelConfig& config, const RunShape& shape,
                                               const std::string& dtype);

}  // namespace ktune::model
