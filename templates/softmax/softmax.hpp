// Host side of the row softmax families (templates/softmax/softmax.cuh), what
// eager attention launches between its two GEMMs:
//   softmax_fwd  y = softmax(scale * x) per row over the columns it sees, 0 elsewhere
//   softmax_bwd  dx = scale * y * (dy - sum(dy * y)) per row, 0 where masked
// Problems: dtype f32 (everything fp32) or bf16 (bf16 x, y, dy, dx; fp32
// math); dims `rows`, `cols` and `causal` (0 or 1). With causal 1 the rows
// are stacked (seq, seq) score blocks, rows = batch * heads * seq and cols =
// seq (so rows % cols == 0): row r is query r % cols and sees columns
// j <= r % cols. seq is cols rather than a dimension of its own: a causal
// score block is square, so a separate seq could only disagree with cols.
// The scale (1/sqrt(head_dim) in attention) is a run-time argument, not part
// of the problem: one tuned kernel serves every head dim.
//
// Run-time arguments: ForwardArgs, BackwardArgs below. Workload buffers, in
// the order the workload-driven `plan` takes their addresses (its scale is
// kWorkloadScale):
//   softmax_fwd: x, y        (y may be x: in place)
//   softmax_bwd: y, dy, dx   (dx may be dy: in place)
// Buffers must be aligned to the config's vector (16 bytes covers every
// config); `plan` checks it.
#pragma once
#include <cstdint>

#include "templates/family.hpp"
#include "templates/softmax/reference.hpp"

namespace ktune::templates::softmax {

/// A row is held in the registers of at most 1024 threads, kMaxElementsPerThread each.
inline constexpr int kMaxElementsPerThread = 32;
/// The longest row (the longest attention context the benchmarks use).
inline constexpr std::int64_t kMaxCols = 16384;
/// The scale of the workloads the tuner validates with: 1/sqrt(80), the
/// 2.7B model's head dim (not a power of two, so a lost scale shows).
inline constexpr float kWorkloadScale = 0.111803398874989f;

/// Device addresses of softmax_fwd's buffers, and the scale.
struct ForwardArgs {
  std::uint64_t x = 0;  // (rows, cols) f32 or bf16: scores
  std::uint64_t y = 0;  // (rows, cols) f32 or bf16: probabilities; may be x
  float scale = 1.0f;   // applied to x before the softmax
};
/// Device addresses of softmax_bwd's buffers, and the forward's scale.
struct BackwardArgs {
  std::uint64_t y = 0;   // (rows, cols) f32 or bf16: the forward's output
  std::uint64_t dy = 0;  // (rows, cols) f32 or bf16
  std::uint64_t dx = 0;  // (rows, cols) f32 or bf16: gradient of the scores x; may be dy
  float scale = 1.0f;    // the forward's scale
};

using ForwardFamily = TypedFamily<ForwardArgs>;
using BackwardFamily = TypedFamily<BackwardArgs>;

const ForwardFamily& forward_family();
const BackwardFamily& backward_family();

}  // namespace ktune::templates::softmax
