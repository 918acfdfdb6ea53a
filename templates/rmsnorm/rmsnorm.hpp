// Host side of the RMSNorm families (templates/rmsnorm/rmsnorm.cuh):
//   rmsnorm_fwd  y = x * rstd * w per row, rstd kept for the backward
//   rmsnorm_bwd  dx, and dw reduced over rows in a fixed order (two launches)
// Problems: dtype f32 (everything fp32) or bf16 (bf16 activations x, y, dy,
// dx, as in bf16 mixed precision; the weight w, rstd and dw stay fp32 and the
// math is fp32, as the model's norms are); dims `rows` (tokens) and `dim`
// (d_model). eps is the model's, kEps.
//
// Workload buffers, in the order `plan` takes their addresses:
//   rmsnorm_fwd: x (rows, dim), w (dim,), y (rows, dim), rstd (rows,)
//   rmsnorm_bwd: x, w, rstd, dy, dx, dw (dim,), scratch (scratch_floats)
// Activation buffers must be aligned to the config's vector (16 bytes covers
// every config); `plan` checks it.
#pragma once
#include <cstdint>

#include "templates/family.hpp"
#include "templates/rmsnorm/reference.hpp"

namespace ktune::templates::rmsnorm {

inline constexpr float kEps = 1e-5f;  ///< the model's RMSNorm eps
/// Rows are held in registers: at most 1024 threads per row times
/// kMaxElementsPerThread elements each.
inline constexpr int kMaxElementsPerThread = 32;
inline constexpr std::int64_t kMaxDim = 1024 * kMaxElementsPerThread;
/// The backward holds x, dy and the dw sums: 8 elements per thread at most
/// fit the registers of a 1024-thread block without spilling.
inline constexpr std::int64_t kMaxBackwardDim = 1024 * 8;
/// Largest `blocks` of rmsnorm_bwd: one partial dw row per block.
inline constexpr std::int64_t kMaxBlocks = 1024;

/// fp32 elements of rmsnorm_bwd's scratch buffer (the partial dw rows) for a
/// problem; enough for every config.
std::int64_t scratch_floats(const Problem& problem);

const Family& forward_family();
const Family& backward_family();

}  // namespace ktune::templates::rmsnorm
