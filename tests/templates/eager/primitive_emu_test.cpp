// The primitives the softmax, rope and embedding chains added, emulated
// against their reference on their ragged problem classes (the every-family
// run checks the same), and a broken edit of each kernel that must fail the
// same comparison. (The chains' in-place tests run the strided ops in place.)
#include <catch2/catch.hpp>

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
  CHECK(broken_worst(eager::causal_mask_family(), "if (c > r % cols) y[i]", "if (c >= r % cols) y[i]") > 1e-2);
  CHECK(broken_worst(eager::strided_binary_family(eager::Binary::kMul), "index[0] * stride[0]",
                     "0 * stride[0]") > 1e-2);  // the first dim's stride lost
  CHECK(broken_worst(eager::strided_copy_family(), "y[view_offset(index, v.y)] = a[view_offset(index, v.a)];",
                     "y[view_offset(index, v.a)] = a[view_offset(index, v.a)];") > 1e-2);
  CHECK(broken_worst(eager::fill_family(), "if (i < n) y[i] = kt::from_float<T>(alpha);",
                     "if (i < n - 1) y[i] = kt::from_float<T>(alpha);") > 1e-2);
  CHECK(broken_worst(eager::gather_rows_family(), "? x[id * cols + c]", "? x[c]") > 1e-2);
  CHECK(broken_worst(eager::index_add_family(), "atomicAdd(y + id * cols + c, x[i])",
                     "atomicAdd(y + id * cols + c, 2.0f * x[i])") > 1e-2);
}

}  // namespace templates_eager_primitive_emu_test
