// Host side of the primitive families (templates/eager/primitive.cuh):
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
//   prim_causal_mask    dims rows, cols (rows % cols == 0: stacked (cols, cols)
//                       blocks); buffer y (rows, cols) in-out: alpha above
//                       each block's diagonal (masked_fill of attention scores)
//   prim_strided_<op>   the binary ops over strided views (x[..., 0::2], a
//                       table broadcast over some dims): dims d0..d3 (the
//                       4-d index space), and per operand a, b, y its
//                       <o>_offset and strides <o>0..<o>3 in elements (0
//                       broadcasts); y's view must not repeat an element
//   prim_strided_copy   y = a over such views (a, y only): stack, cat, contiguous()
//   prim_fill           dims n; buffer y (n,) = alpha (zeros)
//   prim_gather_rows    dims rows, cols, table_rows; buffers x (table_rows, cols),
//                       idx (rows,) int32, y (rows, cols) = x's rows idx (index_select)
//   prim_index_add      as gather_rows, f32 only: y (table_rows, cols) in-out,
//                       y's rows idx += x (rows, cols) (index_add_, fp32 atomics)
// Sizes: cols and table_rows at most 2^31-1 (int32 column indices and ids),
// every tensor (and every strided view's extent) at most 2^40 elements.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "templates/eager/reference.hpp"
#include "templates/family.hpp"

namespace ktune::templates::eager {

/// Device addresses and the scalar of one primitive launch.
struct PrimArgs {
  std::uint64_t x = 0;    // the input (binary: a)
  std::uint64_t b = 0;    // binary: the second input, broadcast as the problem says
  std::uint64_t idx = 0;  // gather, scatter_add: (rows,) int32 column per row; gather_rows, index_add: row of x / y
  std::uint64_t y = 0;    // the output (scatter_add: updated in place)
  float alpha = 0.0f;     // scale, add_scalar: the scalar; scatter_add: the addend; causal_mask, fill: the value
};

using PrimitiveFamily = TypedFamily<PrimArgs>;

const PrimitiveFamily& unary_family(Unary op);
const PrimitiveFamily& binary_family(Binary op);
const PrimitiveFamily& row_reduce_family(Reduce op);
const PrimitiveFamily& col_sum_family();
const PrimitiveFamily& gather_family();
const PrimitiveFamily& scatter_add_family();
const PrimitiveFamily& causal_mask_family();
const PrimitiveFamily& strided_binary_family(Binary op);
const PrimitiveFamily& strided_copy_family();
const PrimitiveFamily& fill_family();
const PrimitiveFamily& gather_rows_family();
const PrimitiveFamily& index_add_family();

/// A strided view of an operand: its first element and the stride of each
/// of the 4 dimensions, in elements.
struct View {
  std::int64_t offset = 0;
  std::array<std::int64_t, 4> strides{};
};
/// The problem of a strided primitive over `sizes` (b absent for the copy).
Problem strided_problem(const std::string& dtype, const std::array<std::int64_t, 4>& sizes, const View& a,
                        const std::optional<View>& b, const View& y);

/// Every primitive family, for the registry.
std::vector<const Family*> primitive_families();

}  // namespace ktune::templates::eager
