// Host side of the primitive families (templates/eager/primitive.cuh): plain
// untuned kernels, one op per launch, the building blocks of the eager
// decompositions (eager.hpp). Each is still a family, so it goes through
// render, NVRTC (or the emulation) and the launch plan like any other; its
// space has one point. Problems: dtype f32 or bf16 (every tensor of the
// launch; math is fp32).
//   prim_<op> unary     neg exp log rsqrt sqrt silu sigmoid square scale add_scalar
//                       dims n; buffers x, y (n,)
//   prim_<op> binary    add sub mul div silu_backward rsqrt_backward
//                       dims rows, cols, b_rows (rows or 1), b_cols (cols or 1):
//                       b (b_rows, b_cols) broadcast over a (rows, cols);
//                       buffers a, b, y
//   prim_row_<op>       sum max mean; dims rows, cols; buffers x (rows, cols), y (rows,)
//   prim_col_sum        dims rows, cols; buffers x (rows, cols), y (cols,)
//   prim_gather         dims rows, cols; buffers x (rows, cols), idx (rows,) int32, y (rows,)
//   prim_scatter_add    dims rows, cols; buffers y (rows, cols) in-out, idx (rows,) int32
#pragma once
#include <cstdint>
#include <vector>

#include "templates/eager/reference.hpp"
#include "templates/family.hpp"

namespace ktune::templates::eager {

/// Device addresses and the scalar of one primitive launch.
struct PrimArgs {
  std::uint64_t x = 0;    // the input (binary: a)
  std::uint64_t b = 0;    // binary: the second input, broadcast as the problem says
  std::uint64_t idx = 0;  // gather, scatter_add: (rows,) int32 column per row
  std::uint64_t y = 0;    // the output (scatter_add: updated in place)
  float alpha = 0.0f;     // scale, add_scalar: the scalar; scatter_add: the addend
};

using PrimitiveFamily = TypedFamily<PrimArgs>;

const PrimitiveFamily& unary_family(Unary op);
const PrimitiveFamily& binary_family(Binary op);
const PrimitiveFamily& row_reduce_family(Reduce op);
const PrimitiveFamily& col_sum_family();
const PrimitiveFamily& gather_family();
const PrimitiveFamily& scatter_add_family();

/// Every primitive family, for the registry.
std::vector<const Family*> primitive_families();

}  // namespace ktune::templates::eager
