// Host side of the SwiGLU gate families (templates/swiglu/swiglu.cuh):
//   swiglu_fwd  h = silu(a) * b
//   swiglu_bwd  da = dh * b * silu'(a), db = dh * silu(a)
// Problems: dtype f32 or bf16 (bf16 in and out, fp32 math); one dimension
// `n`, the number of elements (batch * context * d_ff in the model).
// Run-time arguments: ForwardArgs, BackwardArgs below; workload buffers, in
// the order the workload-driven `plan` takes their addresses:
//   swiglu_fwd  a, b (inputs), h (output)
//   swiglu_bwd  a, b, dh (inputs), da, db (outputs); the kernel also accepts
//               da == dh, the in-place gradient of the model's backward.
#pragma once
#include <cstdint>

#include "templates/family.hpp"
#include "templates/swiglu/reference.hpp"

namespace ktune::templates::swiglu {

/// Device addresses of swiglu_fwd's buffers.
struct ForwardArgs {
  std::uint64_t a = 0;  // (n,) f32 or bf16: the gate, W1 x
  std::uint64_t b = 0;  // (n,) f32 or bf16: W3 x
  std::uint64_t h = 0;  // (n,) f32 or bf16: silu(a) * b
};
/// Device addresses of swiglu_bwd's buffers.
struct BackwardArgs {
  std::uint64_t a = 0;   // (n,) f32 or bf16
  std::uint64_t b = 0;   // (n,) f32 or bf16
  std::uint64_t dh = 0;  // (n,) f32 or bf16
  std::uint64_t da = 0;  // (n,) f32 or bf16; may be dh (in place)
  std::uint64_t db = 0;  // (n,) f32 or bf16
};

using ForwardFamily = TypedFamily<ForwardArgs>;
using BackwardFamily = TypedFamily<BackwardArgs>;

const ForwardFamily& forward_family();
const BackwardFamily& backward_family();

}  // namespace ktune::templates::swiglu
