// Host side of the attention family (templates/attention/attention.cuh):
//   attention_fwd  O = softmax(scale * Q K^T) V per (batch, head), causal or
//                  not, and the row log-sum-exp (fp32) the backward needs
// Problems: dtype bf16, f16 or f32 (inputs and O; f32 multiplies in tf32;
// fp32 scores, softmax and accumulation); dims `batch`, `heads`, `seq` (any
// length from 1), `head_dim` (16, 32, 64, 80 or 128), `causal` (0 or 1),
// and optionally `kv_heads` (grouped-query attention: query head h reads
// K/V head h / (heads / kv_heads); as many as `heads` when absent).
//
// Workload buffers, in the order `args_of` takes their addresses:
//   q, o (batch, seq, heads, head_dim), k, v (batch, seq, kv_heads,
//   head_dim), lse (batch, heads, seq) fp32; in the order q, k, v, o, lse.
// The typed face (ForwardArgs) takes any element strides for q, k, v and o
// (batch, head and seq; head_dim contiguous), e.g. (batch, heads, seq,
// head_dim) or views into a fused QKV buffer, and any positive scale.
#pragma once
#include <cstdint>

#include "templates/attention/reference.hpp"
#include "templates/family.hpp"

namespace ktune::templates::attention {

/// The head dims the family compiles for.
inline constexpr std::int64_t kHeadDims[] = {16, 32, 64, 80, 128};
/// Longest sequence: query-row indices and block offsets stay within int.
inline constexpr std::int64_t kMaxSeq = std::int64_t{1} << 30;
/// Largest batch and head counts: the grid's z and y extents.
inline constexpr std::int64_t kMaxGridYZ = 65535;

/// Device buffers of one attention_fwd run. q, k, v and o are of the
/// problem's dtype, 16-byte aligned, with strides in elements that are
/// multiples of 16 bytes (8 elements of 16 bits, 4 floats: rows are copied
/// in 16-byte chunks); k and v have kv_heads heads; lse is fp32, (batch,
/// heads, seq) contiguous.
struct ForwardArgs {
  std::uint64_t q = 0;
  std::uint64_t k = 0;
  std::uint64_t v = 0;
  std::uint64_t o = 0;
  std::uint64_t lse = 0;
  TensorStrides q_strides, k_strides, v_strides, o_strides;
  float scale = 0;  ///< softmax scale, > 0; default_scale(head_dim) is the usual one
};

/// 1 / sqrt(head_dim), rounded to fp32 as the kernel receives it.
float default_scale(std::int64_t head_dim);
/// The problem's sizes as the reference's shape (kv_heads included).
AttentionShape shape_of(const Problem& problem);
/// Strides of a contiguous (batch, seq, kv_heads, head_dim) K or V.
TensorStrides kv_strides(const AttentionShape& s);
/// Shared-memory bytes a config needs for a problem (all of it dynamic).
std::int64_t shared_bytes(const Config& config, const Problem& problem);

const TypedFamily<ForwardArgs>& forward_family();

/// Device buffers of one attention_bwd run. Element buffers as ForwardArgs
/// (dout and dq with Q's heads, dk and dv with K's); lse is the forward's,
/// fp32 (batch, heads, seq) contiguous; workspace: workspace_bytes(config,
/// problem) bytes, 16-byte aligned (D and, for dQ by atomics, an fp32
/// (batch, heads, seq, head_dim) accumulator).
struct BackwardArgs {
  std::uint64_t q = 0;
  std::uint64_t k = 0;
  std::uint64_t v = 0;
  std::uint64_t o = 0;
  std::uint64_t lse = 0;
  std::uint64_t dout = 0;
  std::uint64_t dq = 0;
  std::uint64_t dk = 0;
  std::uint64_t dv = 0;
  std::uint64_t workspace = 0;
  TensorStrides q_strides, k_strides, v_strides, o_strides, do_strides, dq_strides, dk_strides, dv_strides;
  float scale = 0;  ///< the forward's softmax scale
};

/// Relative L2 tolerance of an f32 (tf32) problem's dQ, dK and dV. A
/// rounding to tf32 (u = 2^-11) leaves a relative error of RMS about u/sqrt(3)
/// in what it rounds. dV meets the forward's roundings (q and k in S, P, dO:
/// its errors, 3.5-4.8e-4, are O's); dQ and dK meet up to six independent
/// ones on their way (q and k in S, dO and v in dP, dS, then k or q), so
/// their expected error is sqrt(6) u / sqrt(3) = sqrt(2) u = 6.9e-4 (5.0-7.4e-4
/// measured, emulated, every head dim, seq 17-257). Twice that covers the
/// spread of a relative L2 over a small problem's few hundred elements and
/// the cancellation in dS = P (dP - D): 1.5e-3, about 3 u. (bf16 and f16
/// keep their dtype's 1e-2: P and dS rounded to the dtype, then the result,
/// sqrt(2) x 2^-8 / sqrt(3) = 3.2e-3 expected for bf16, 2.4-3.0e-3 measured.)
inline constexpr double kTf32BackwardTolerance = 1.5e-3;
/// The tolerance dQ, dK and dV are checked with: the dtype's for bf16 and
/// f16, kTf32BackwardTolerance for f32.
double backward_tolerance(const Problem& problem);
/// Shared-memory bytes of the backward's largest kernel for a config.
std::int64_t backward_shared_bytes(const Config& config, const Problem& problem);

const TypedFamily<BackwardArgs>& backward_family();

}  // namespace ktune::templates::attention
