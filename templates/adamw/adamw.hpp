// Host side of the AdamW families (templates/adamw/adamw.cuh):
//   adamw         fused multi-tensor kernel, tuned (the `_fused_adam` column)
//   adamw_single  one fused launch per tensor (`compiled_single_tensor_adam`)
//   adamw_eager   eight primitive launches per tensor (`_single_tensor_adam`)
// Problems: dtype f32 (fp32 params) or bf16 (fp32 master weights plus a bf16
// copy written by the step); dims `tensors` and `numel` (elements per tensor).
#pragma once
#include <cstdint>
#include <vector>

#include "templates/adamw/reference.hpp"
#include "templates/family.hpp"

namespace ktune::templates::adamw {

/// Device addresses of one parameter tensor's optimizer operands.
struct TensorAddresses {
  std::uint64_t param = 0;       // (numel,) fp32 master weights
  std::uint64_t grad = 0;        // (numel,) fp32
  std::uint64_t exp_avg = 0;     // (numel,) fp32
  std::uint64_t exp_avg_sq = 0;  // (numel,) fp32
  std::uint64_t param_bf16 = 0;  // (numel,) bf16 copy, 0 when not wanted
  std::int64_t numel = 0;
};

/// Clip-by-norm folded into the step (torch.nn.utils.clip_grad_norm_
/// semantics): each gradient is read as g * min(1, max_norm / (norm + 1e-6)),
/// the norm read from device memory where grad_norm wrote it (its out[0]).
/// The gradients themselves are not written.
struct Clip {
  std::uint64_t norm = 0;  // (1,) f32: the global gradient norm; 0: no clipping
  float max_norm = 0.0f;   // the threshold; <= 0 never clips
};

/// Run-time arguments of one AdamW step. The problem's `numel` is the
/// largest tensor's (what workspace_bytes is sized by); its dtype bf16 asks
/// for the bf16 copies.
struct Args {
  std::vector<TensorAddresses> tensors;  // the parameter tensors, any count and sizes
  AdamwHyper hyper;                      // lr, betas, eps, weight decay and the step (from 1)
  std::uint64_t workspace = 0;           // (numel,) f32: workspace_bytes(config, problem); adamw_eager's only
  Clip clip;                             // off unless clip.norm is set; the fused families only
};

/// An AdamW family: plans a step over any list of tensors (the model
/// runtime's parameters), not only its workloads.
class AdamwFamily : public TypedFamily<Args> {
 public:
  /// Launches for one step over `tensors`. `scratch` is a device buffer of at
  /// least max(numel) floats (used by the eager family only); `plan` with
  /// Args calls this. `clip` is honoured by adamw and adamw_single;
  /// adamw_eager refuses it (eager clips with grad_norm's own launch).
  virtual std::vector<Launch> plan_tensors(const Config& config, bool bf16_copy,
                                           const std::vector<TensorAddresses>& tensors, std::uint64_t scratch,
                                           const AdamwHyper& hyper, const DeviceLimits& device,
                                           const Clip& clip = {}) const = 0;
  /// Hyper-parameters of the workloads (a visible update, bias corrections ≠ 1).
  static AdamwHyper workload_hyper();
};

const AdamwFamily& multi_tensor_family();
const AdamwFamily& single_tensor_family();
const AdamwFamily& eager_family();

}  // namespace ktune::templates::adamw
