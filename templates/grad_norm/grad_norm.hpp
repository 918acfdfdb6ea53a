// Host side of the grad_norm family (templates/grad_norm/grad_norm.cuh):
// the global L2 norm of every gradient tensor, a deterministic two-level sum
// (a partial per chunk into the workspace, then one block adds them in
// order), the clip factor computed on the device, and optionally the clip
// itself (grads scaled in place) as a third launch.
// Problems: dtype f32 (gradients are fp32 in every precision mode); dims
// `tensors`, `numel` (elements of the largest tensor; workspace_bytes is
// sized by tensors * numel) and `in_place` (1: the gradients scaled by the
// factor, a launch of its own; 0: the norm and factor only, as a fused
// optimizer that reads the factor uses it).
//
// Run-time arguments: Args below. Workload buffers, in the order the
// workload-driven `plan` takes their addresses: grad[0..tensors) (in-out
// where in_place: clipped), out (2 floats: norm, clip factor), scratch.
#pragma once
#include <cstdint>
#include <vector>

#include "templates/family.hpp"
#include "templates/grad_norm/reference.hpp"

namespace ktune::templates::grad_norm {

/// One gradient tensor.
struct Tensor {
  std::uint64_t grad = 0;  // (numel,) f32
  std::int64_t numel = 0;
};

/// Device addresses and settings of one norm (and clip).
struct Args {
  std::vector<Tensor> tensors;  // any count and sizes
  std::uint64_t out = 0;        // (2,) f32: the norm, then the clip factor (1 when not clipping)
  float max_norm = 0.0f;        // clip threshold; <= 0 computes the norm only
  bool clip = false;            // scale the gradients by the factor in place (a third launch)
  std::uint64_t workspace = 0;  // f32 partials: workspace_bytes(config, problem), or partial_floats(config, tensors)
};

using GradNormFamily = TypedFamily<Args>;
const GradNormFamily& family();

/// Partials (fp32 workspace elements) a run of `config` over `tensors` needs.
std::int64_t partial_floats(const Config& config, const std::vector<Tensor>& tensors);

}  // namespace ktune::templates::grad_norm
