// Host side of the RMSNorm families (templates/rmsnorm/rmsnorm.cuh):
//   rmsnorm_fwd  y = x * rstd * w per row, rstd kept for the backward
//   rmsnorm_bwd  dx, and dw reduced over rows in a fixed order (two launches)
//   residual_rmsnorm_fwd  h = x + r, then rmsnorm_fwd of h, in one pass: the
//                residual add that ends a transformer sub-block fused with
//                the norm that starts the next; h may be x or r (in place)
//   residual_rmsnorm_bwd  dh = dstream + rmsnorm_bwd's dx of h: the residual
//                stream's gradient, which is also the gradient of x and of r;
//                dh may be dstream (in place); dw as rmsnorm_bwd
// Problems: dtype f32 (everything fp32) or bf16 (bf16 activations x, y, dy,
// dx, as in bf16 mixed precision; the weight w, rstd and dw stay fp32 and the
// math is fp32, as the model's norms are); dims `rows` (tokens) and `dim`
// (d_model). eps is the model's, kEps.
//
// Run-time arguments: ForwardArgs, BackwardArgs below. Workload buffers, in
// the order the workload-driven `plan` takes their addresses:
//   rmsnorm_fwd: x, w, y, rstd
//   rmsnorm_bwd: x, w, rstd, dy, dx, dw, scratch (scratch_floats(problem)
//                floats: the workspace of every config)
//   residual_rmsnorm_fwd: x, r, w, h, y, rstd
//   residual_rmsnorm_bwd: h, w, rstd, dy, dstream, dh, dw, scratch
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

/// fp32 elements of the scratch buffer of rmsnorm_bwd's workloads (the
/// partial dw rows): at least workspace_bytes / 4 for every config.
std::int64_t scratch_floats(const Problem& problem);

/// Device addresses of rmsnorm_fwd's buffers.
struct ForwardArgs {
  std::uint64_t x = 0;     // (rows, dim) f32 or bf16
  std::uint64_t w = 0;     // (dim,) f32
  std::uint64_t y = 0;     // (rows, dim) f32 or bf16
  std::uint64_t rstd = 0;  // (rows,) f32
};
/// Device addresses of rmsnorm_bwd's buffers; dw is overwritten, not accumulated.
struct BackwardArgs {
  std::uint64_t x = 0;          // (rows, dim) f32 or bf16
  std::uint64_t w = 0;          // (dim,) f32
  std::uint64_t rstd = 0;       // (rows,) f32, as the forward left it
  std::uint64_t dy = 0;         // (rows, dim) f32 or bf16
  std::uint64_t dx = 0;         // (rows, dim) f32 or bf16
  std::uint64_t dw = 0;         // (dim,) f32
  std::uint64_t workspace = 0;  // (blocks, dim) f32 partial dw rows: workspace_bytes(config, problem)
};

/// Device addresses of residual_rmsnorm_fwd's buffers.
struct ResidualForwardArgs {
  std::uint64_t x = 0;     // (rows, dim) f32 or bf16: the residual stream
  std::uint64_t r = 0;     // (rows, dim) f32 or bf16: the branch output added to it
  std::uint64_t w = 0;     // (dim,) f32
  std::uint64_t h = 0;     // (rows, dim) f32 or bf16: x + r; may be x or r
  std::uint64_t y = 0;     // (rows, dim) f32 or bf16
  std::uint64_t rstd = 0;  // (rows,) f32
};
/// Device addresses of residual_rmsnorm_bwd's buffers; dw is overwritten.
struct ResidualBackwardArgs {
  std::uint64_t h = 0;          // (rows, dim) f32 or bf16, as the forward wrote it
  std::uint64_t w = 0;          // (dim,) f32
  std::uint64_t rstd = 0;       // (rows,) f32, as the forward left it
  std::uint64_t dy = 0;         // (rows, dim) f32 or bf16: gradient of y
  std::uint64_t dstream = 0;    // (rows, dim) f32 or bf16: gradient reaching h through the residual path
  std::uint64_t dh = 0;         // (rows, dim) f32 or bf16: dstream + the norm's dx; may be dstream
  std::uint64_t dw = 0;         // (dim,) f32
  std::uint64_t workspace = 0;  // as BackwardArgs::workspace
};

using ForwardFamily = TypedFamily<ForwardArgs>;
using BackwardFamily = TypedFamily<BackwardArgs>;
using ResidualForwardFamily = TypedFamily<ResidualForwardArgs>;
using ResidualBackwardFamily = TypedFamily<ResidualBackwardArgs>;

const ForwardFamily& forward_family();
const BackwardFamily& backward_family();
const ResidualForwardFamily& residual_forward_family();
const ResidualBackwardFamily& residual_backward_family();

}  // namespace ktune::templates::rmsnorm
