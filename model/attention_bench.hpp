// Materialised ("eager") attention as the runtime's eager mode runs it, for
// `ktune bench attention`'s eager columns (seed 003's baseline): the
// attention op of DeviceOps in eager mode on a one-layer model of the
// problem's shape (d_model = heads x head_dim, the sequence its context, the
// problem's batch), so the GEMMs (cuBLASLt's first algorithm on cuda), the
// softmax's chain of primitive kernels and the (batch, heads, seq, seq)
// probabilities are the e2e benchmark's own; the forward's softmax is also
// timed alone. Both passes are checked against
// the attention families' fp64 reference first: the same workloads (at
// benchmark sizes, the same sampled rows), O after the forward, dQ, dK and
// dV after the backward.
#pragma once
#include <string>

#include "templates/problem.hpp"
#include "tuner/exec/backend.hpp"
#include "tuner/run/runner.hpp"

namespace ktune::model {

struct EagerAttentionResult {
  tuner::Measurement forward, backward;
  /// The forward's softmax launch alone (scale, mask, softmax over the
  /// scores, in place): its share of the forward is seed 003's softmax share.
  tuner::Measurement softmax;
  /// Relative L2 errors of the checks: O; dQ, dK, dV.
  double o_error = 0, dq_error = 0, dk_error = 0, dv_error = 0;
  /// q, k, v, O and the probabilities, what the backward reads.
  double memory_after_forward_bytes = 0;
  std::string gemms;  ///< the GEMM engine's name
};

/// Whether eager attention runs `problem`'s dtype (f32 or bf16; the runtime
/// has no f16 precision) and shape (every query head with its own K/V head).
bool eager_attention_supports(const templates::Problem& problem);

/// Checks, then times, eager attention's forward and backward on `backend`
/// for an attention_fwd problem (batch, heads, seq, head_dim, causal; f32
/// without the tf32 matrix units, as PyTorch's default, or bf16). Throws
/// Error(kCheckFailed) naming the tensor when a check fails, kInvalidInput
/// when the problem is not supported.
EagerAttentionResult bench_eager_attention(tuner::exec::Backend& backend, const templates::Problem& problem,
                                           const tuner::RunOptions& options, std::uint64_t seed = 1);

}  // namespace ktune::model
