// Host side of the RoPE families (templates/rope/rope.cuh), applied to q or k:
//   rope_fwd  y = x with each interleaved pair rotated by its angle
//   rope_bwd  dx = dy rotated by the opposite angle
// Problems: dtype f32 or bf16 (bf16 activations; fp32 cos/sin tables and
// math); dims `tokens` (batch * context, laid out (batch, seq)), `heads`,
// `head_dim` (even) and `seq` (the context: token t sits at position t % seq).
// Buffers, in Workload and plan() address order:
//   rope_fwd  x (tokens, heads, head_dim), cos, sin (seq, head_dim / 2) (inputs), y (output)
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

const Family& forward_family();
const Family& backward_family();

}  // namespace ktune::templates::rope
