// Host side of the RoPE families (templates/rope/rope.cuh), applied to q or k:
//   rope_fwd  y = x with each interleaved pair rotated by its angle
//   rope_bwd  dx = dy rotated by the opposite angle
// Problems: dtype f32 or bf16 (bf16 activations; fp32 cos/sin tables and
// math); dims `tokens` (batch * context, laid out (batch, seq)), `heads`,
// `head_dim` (even) and `seq` (the context: token t sits at position t % seq).
// Run-time arguments: ForwardArgs, BackwardArgs below; workload buffers, in
// the order the workload-driven `plan` takes their addresses:
//   rope_fwd  x, cos, sin (inputs), y (output)
//   rope_bwd  dy, cos, sin (inputs), dx (output)
// The tables are the reference's (rope_tables, theta kTheta) in fp32. The
// kernels also accept y == x (dx == dy), the model's in-place rotation, and
// any element-aligned pointers (misaligned ones take a scalar path).
#pragma once
#include <cstdint>

#include "templates/family.hpp"
#include "templates/rope/reference.hpp"

namespace ktune::templates::rope {

inline constexpr double kTheta = 10000.0;  ///< the model's rope_theta, for the workloads' tables
/// The widest head a block's threads cover with pair-wide accesses
/// (head_dim / 2 threads at most, well inside 1024).
inline constexpr std::int64_t kMaxHeadDim = 512;

/// Device addresses of rope_fwd's buffers.
struct ForwardArgs {
  std::uint64_t x = 0;    // (tokens, heads, head_dim) f32 or bf16
  std::uint64_t cos = 0;  // (seq, head_dim / 2) f32
  std::uint64_t sin = 0;  // (seq, head_dim / 2) f32
  std::uint64_t y = 0;    // (tokens, heads, head_dim) f32 or bf16; may be x (in place)
  /// Elements from one token's row of x and y to the next's: 0 for heads *
  /// head_dim (contiguous), more for q and k inside a fused projection's rows.
  std::int64_t row_stride = 0;
};
/// Device addresses of rope_bwd's buffers.
struct BackwardArgs {
  std::uint64_t dy = 0;   // (tokens, heads, head_dim) f32 or bf16
  std::uint64_t cos = 0;  // (seq, head_dim / 2) f32
  std::uint64_t sin = 0;  // (seq, head_dim / 2) f32
  std::uint64_t dx = 0;   // (tokens, heads, head_dim) f32 or bf16; may be dy (in place)
  std::int64_t row_stride = 0;  // as ForwardArgs::row_stride
};

using ForwardFamily = TypedFamily<ForwardArgs>;
using BackwardFamily = TypedFamily<BackwardArgs>;

const ForwardFamily& forward_family();
const BackwardFamily& backward_family();

}  // namespace ktune::templates::rope
