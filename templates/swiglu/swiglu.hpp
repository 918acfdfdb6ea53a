// Host side of the SwiGLU gate families (templates/swiglu/swiglu.cuh):
//   swiglu_fwd  h = silu(a) * b
//   swiglu_bwd  da = dh * b * silu'(a), db = dh * silu(a)
// Problems: dtype f32 or bf16 (bf16 in and out, fp32 math); one dimension
// `n`, the number of elements (batch * context * d_ff in the model).
// Buffers, in Workload and plan() address order:
//   swiglu_fwd  a, b (inputs), h (output)
//   swiglu_bwd  a, b, dh (inputs), da, db (outputs); the kernel also accepts
//               da == dh, the in-place gradient of the model's backward.
#pragma once
#include "templates/family.hpp"
#include "templates/swiglu/reference.hpp"

namespace ktune::templates::swiglu {

const Family& forward_family();
const Family& backward_family();

}  // namespace ktune::templates::swiglu
