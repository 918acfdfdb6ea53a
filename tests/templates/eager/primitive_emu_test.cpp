// The primitives the softmax, rope and embedding chains added, emulated
// against their reference on their ragged problem classes (the every-family
// run checks the same), and a broken edit of each kernel that must fail the
// same comparison. (The chains' in-place tests run the strided ops in place.)
// The elementwise kernels (and AdamW's eager ops) on operands aligned for
// their 16-byte vectors and on operands that are not.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "templates/adamw/adamw.hpp"
#include "templates/eager/primitive.hpp"
#include "templates/emulated_plan.hpp"

namespace templates_eager_primitive_emu_test {

using namespace ktune;
using namespace ktune::templates;

namespace {

/// The worst output error of `family`'s default config on each of its problem
/// classes, from its source with `from` replaced by `to`.
double broken_worst(const Family& family, const std::string& from, const std::string& to) {
  double worst = 0;
  for (const auto& p : family.problem_classes())
    worst = std::max(worst, test::broken_error(family, family.default_config(p), p, from, to));
  return worst;
}

}  // namespace

TEST_CASE("eager primitives of the softmax, rope and embedding chains match their references", "[eager][emu]") {
  for (const Family* f : {&eager::causal_mask_family(), &eager::strided_binary_family(eager::Binary::kMul),
                          &eager::strided_binary_family(eager::Binary::kSub), &eager::strided_copy_family(),
                          &eager::fill_family(), &eager::gather_rows_family(), &eager::index_add_family()})
    for (const auto& p : f->problem_classes()) test::check_emulated_plan(*f, f->default_config(p), p);
}

TEST_CASE("broken eager primitives fail their reference check", "[eager][emu]") {
  CHECK(broken_worst(eager::causal_mask_family(), "masked[k] = c > diagonal;", "masked[k] = c >= diagonal;") > 1e-2);
  CHECK(broken_worst(eager::strided_binary_family(eager::Binary::kMul), "index[0] * stride[0]",
                     "0 * stride[0]") > 1e-2);  // the first dim's stride lost
  CHECK(broken_worst(eager::strided_copy_family(), "y[view_offset(index, v.y)] = a[view_offset(index, v.a)];",
                     "y[view_offset(index, v.a)] = a[view_offset(index, v.a)];") > 1e-2);
  CHECK(broken_worst(eager::fill_family(), "[alpha] { return alpha; }", "[alpha] { return 2.0f * alpha; }") > 1e-2);
  CHECK(broken_worst(eager::gather_rows_family(), "? x[id * cols + c]", "? x[c]") > 1e-2);
  CHECK(broken_worst(eager::index_add_family(), "atomicAdd(y + id * cols + c, x[i])",
                     "atomicAdd(y + id * cols + c, 2.0f * x[i])") > 1e-2);
}

namespace {

const Problem kExpF32{"f32", {{"n", 4999}}};
const Problem kFullB{"f32", {{"rows", 37}, {"cols", 104}, {"b_rows", 37}, {"b_cols", 104}}};
const Problem kRowB{"bf16", {{"rows", 37}, {"cols", 101}, {"b_rows", 1}, {"b_cols", 101}}};
const Problem kAlignedRows{"f32", {{"rows", 37}, {"cols", 1000}}};  // every row 16-byte aligned

}  // namespace

TEST_CASE("elementwise primitives match their references on aligned operands and on operands that are not",
          "[eager][emu]") {
  const std::vector<std::pair<const Family*, Problem>> cases = {
      {&eager::unary_family(eager::Unary::kExp), kExpF32},
      {&eager::unary_family(eager::Unary::kSilu), Problem{"bf16", {{"n", 1001}}}},
      {&eager::binary_family(eager::Binary::kMul), kFullB},
      {&eager::binary_family(eager::Binary::kSub), kRowB},
      {&eager::binary_family(eager::Binary::kDiv), Problem{"f32", {{"rows", 37}, {"cols", 101}, {"b_rows", 37},
                                                                   {"b_cols", 1}}}},
      {&eager::row_reduce_family(eager::Reduce::kSum), kAlignedRows},
      {&eager::row_reduce_family(eager::Reduce::kMax), Problem{"bf16", {{"rows", 19}, {"cols", 336}}}},
      {&eager::row_reduce_family(eager::Reduce::kMean), Problem{"bf16", {{"rows", 19}, {"cols", 333}}}},
      {&eager::col_sum_family(), Problem{"f32", {{"rows", 37}, {"cols", 1001}}}},
      {&eager::col_sum_family(), Problem{"bf16", {{"rows", 300}, {"cols", 40}}}},
      {&eager::causal_mask_family(), Problem{"bf16", {{"rows", 300}, {"cols", 100}}}},
      {&eager::fill_family(), Problem{"bf16", {{"n", 1001}}}},
      {&eager::gather_rows_family(), Problem{"bf16", {{"rows", 45}, {"cols", 80}, {"table_rows", 7}}}},
      {&eager::gather_rows_family(), Problem{"f32", {{"rows", 37}, {"cols", 100}, {"table_rows", 50}}}},
      {&eager::gather_rows_family(), Problem{"bf16", {{"rows", 45}, {"cols", 77}, {"table_rows", 7}}}},
      {&adamw::eager_family(), Problem{"f32", {{"tensors", 3}, {"numel", 4999}}}},
      {&adamw::eager_family(), Problem{"bf16", {{"tensors", 2}, {"numel", 1001}}}},
  };
  for (const auto& [f, p] : cases)
    for (const std::size_t shift : {0, 4}) test::check_emulated_plan(*f, f->default_config(p), p, {}, 1, shift);
}

TEST_CASE("broken vector and element paths of the elementwise primitives fail their reference check",
          "[eager][emu]") {
  auto worst = [](const Family& f, const Problem& p, const std::string& from, const std::string& to,
                  std::size_t shift) { return test::broken_error(f, f.default_config(p), p, from, to, shift); };
  const Family& exp = eager::unary_family(eager::Unary::kExp);
  // The vector path (aligned operands) and the element path (shifted ones), loads and stores.
  CHECK(worst(exp, kExpF32, "out[k] = to_float(v.v[k]);", "out[k] = to_float(v.v[0]);", 0) > 1e-2);
  CHECK(worst(exp, kExpF32, "? to_float(p[e.first + k])", "? to_float(p[e.first])", 4) > 1e-2);
  CHECK(worst(exp, kExpF32, "v.v[k] = from_float<T>(in[k]);", "v.v[k] = from_float<T>(in[0]);", 0) > 1e-2);
  CHECK(worst(exp, kExpF32, "if (e.first + k < e.n) p[", "if (e.first + k < e.n - 1) p[", 4) > 1e-2);
  // A broadcast b walked from column 0 instead of the thread's first column; a full b read as a.
  const Family& sub = eager::binary_family(eager::Binary::kSub);
  CHECK(worst(sub, kRowB, "c = e.first - r * cols;\n#pragma unroll", "c = 0;\n#pragma unroll", 0) > 1e-2);
  const Family& mul = eager::binary_family(eager::Binary::kMul);
  CHECK(worst(mul, kFullB, "binary_op<OP>(av, bv); }, a, b);", "binary_op<OP>(av, bv); }, a, a);", 0) > 1e-2);
  // A row's vectors summed by their first element; a column sum without the second warp's rows.
  CHECK(worst(eager::row_reduce_family(eager::Reduce::kSum), kAlignedRows, "take(kt::to_float(w.v[k]));",
              "take(kt::to_float(w.v[0]));", 0) > 1e-2);
  const Problem rows_of_80{"bf16", {{"rows", 45}, {"cols", 80}, {"table_rows", 7}}};  // vectors of 8
  CHECK(worst(eager::gather_rows_family(), rows_of_80, "Vec<T, N>*>(x + id * cols + c);", "Vec<T, N>*>(x + c);", 0) >
        1e-2);
  CHECK(worst(eager::col_sum_family(), Problem{"f32", {{"rows", 37}, {"cols", 1001}}}, "for (int w = 1; w < WARPS;",
              "for (int w = 2; w < WARPS;", 0) > 1e-2);
  // AdamW's eager ops: the second moment updated by the gradient, not its square.
  const Family& adam = adamw::eager_family();
  CHECK(worst(adam, Problem{"f32", {{"tensors", 3}, {"numel", 4999}}}, "return xv + a * yv * zv;",
              "return xv + a * yv;", 0) > 1e-2);
}

TEST_CASE("prim_row_max: a NaN in a row is its max, as torch.amax's, on the vector path and the element path",
          "[eager][emu]") {
  const auto& f = eager::row_reduce_family(eager::Reduce::kMax);
  for (const std::int64_t cols : {1000, 999}) {  // rows 16-byte aligned (vectors), and not (elements)
    DYNAMIC_SECTION("cols " << cols) {
      const Problem p{"f32", {{"rows", 5}, {"cols", cols}}};
      templates::Workload w = f.make_workload(p, 3);
      const float nan = std::numeric_limits<float>::quiet_NaN();
      for (const std::int64_t at : {1 * cols + 0, 3 * cols + cols - 1})  // a row's first element, another's last
        std::memcpy(w.buffers[0].bytes.data() + 4 * at, &nan, 4);
      const Config c = f.default_config(p);
      const auto out = test::emulated_outputs(f, w, f.render(c, p), c, p);
      const auto& y = out.rbegin()->second;
      for (std::size_t r = 0; r < 5; ++r) {
        INFO("row " << r);
        float v;
        std::memcpy(&v, y.data() + 4 * r, 4);
        if (r == 1 || r == 3)
          CHECK(std::isnan(v));
        else
          CHECK(v == static_cast<float>(value_at(DType::kF32, w.buffers.back().expected, r)));
      }
    }
  }
}

}  // namespace templates_eager_primitive_emu_test
