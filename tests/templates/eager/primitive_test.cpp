// The primitive families' problem checks, host side: sizes whose tensors
// would pass 2^40 elements (their products past int64 included), and tables
// past what int32 ids index, refused before anything is sized from them.
#include "templates/eager/primitive.hpp"

#include <catch2/catch.hpp>

#include "base/error.hpp"

namespace templates_eager_primitive_test {

using namespace ktune;
using namespace ktune::templates;

namespace {
constexpr std::int64_t kTwo40 = std::int64_t{1} << 40;
constexpr std::int64_t kMaxInt32 = (std::int64_t{1} << 31) - 1;

Problem binary(std::int64_t rows, std::int64_t cols) {
  return Problem{"f32", {{"rows", rows}, {"cols", cols}, {"b_rows", 1}, {"b_cols", 1}}};
}
Problem table(std::int64_t rows, std::int64_t cols, std::int64_t table_rows) {
  return Problem{"f32", {{"rows", rows}, {"cols", cols}, {"table_rows", table_rows}}};
}
}  // namespace

TEST_CASE("primitives refuse rows * cols past 2^40 elements, a product past int64 included", "[eager]") {
  const Family& add = eager::binary_family(eager::Binary::kAdd);
  // 2^40 rows of 2^24: 2^64 elements, which int64 arithmetic wraps to 0.
  CHECK_THROWS_WITH(add.check_problem(binary(kTwo40, 1 << 24)),
                    "prim_add: a and y would hold rows * cols = 1099511627776 * 16777216 elements (past int64), more "
                    "than 2^40, the most one tensor may (past any device's memory)");
  CHECK_THROWS_AS(add.make_workload(binary(kTwo40, 1 << 24), 1), Error);  // refused before any buffer is sized
  CHECK_THROWS_WITH(add.check_problem(binary(1 << 20, (1 << 20) + 1)),
                    Catch::Contains("rows * cols = 1048576 * 1048577 elements = 1099512676352, more than 2^40"));
  CHECK_NOTHROW(add.check_problem(binary(1 << 20, 1 << 20)));
  // Every 2-d primitive: the reductions, gather, scatter_add, causal_mask.
  for (const Family* f : {&eager::row_reduce_family(eager::Reduce::kSum), &eager::col_sum_family(),
                          &eager::gather_family(), &eager::scatter_add_family(), &eager::causal_mask_family()}) {
    INFO(f->name());
    CHECK_THROWS_WITH(f->check_problem(Problem{"f32", {{"rows", kTwo40}, {"cols", 1 << 24}}}),
                      Catch::Contains("rows * cols = 1099511627776 * 16777216 elements (past int64), more than 2^40"));
  }
}

TEST_CASE("a row reduction refuses columns its int index would step past, and a grid past 2^31-1 blocks",
          "[eager]") {
  const Family& sum = eager::row_reduce_family(eager::Reduce::kSum);
  CHECK_THROWS_WITH(sum.check_problem(Problem{"f32", {{"rows", 1}, {"cols", kMaxInt32}}}),
                    Catch::Contains("dimension 'cols' must be in 1..2147479551"));
  CHECK_NOTHROW(sum.check_problem(Problem{"f32", {{"rows", 1}, {"cols", kMaxInt32 - 4096}}}));
  CHECK_NOTHROW(eager::col_sum_family().check_problem(Problem{"f32", {{"rows", 1}, {"cols", kMaxInt32}}}));
  // A block per row: past 2^31-1 rows no plan is made (eager::plan asks no is_valid).
  const Problem tall{"f32", {{"rows", kMaxInt32 + 1}, {"cols", 2}}};
  CHECK_THROWS_WITH(sum.plan(sum.default_config(tall), tall, {0, 0}, DeviceLimits::for_arch("sm_90")),
                    Catch::Contains("more than a grid holds (2^31-1)"));
}

TEST_CASE("gather_rows and index_add refuse tables past int32 ids and past 2^40 elements", "[eager]") {
  for (const Family* f : {&eager::gather_rows_family(), &eager::index_add_family()}) {
    INFO(f->name());
    CHECK_THROWS_WITH(f->check_problem(table(3, 4, std::int64_t{1} << 32)),
                      f->name() + ": dimension 'table_rows' must be in 1..2^31-1 (ids are int32)");
    CHECK_THROWS_WITH(f->check_problem(table(3, 4, kMaxInt32 + 1)), Catch::Contains("(ids are int32)"));
    CHECK_NOTHROW(f->check_problem(table(3, 4, kMaxInt32)));
    CHECK_THROWS_WITH(f->check_problem(table(3, 1024, kMaxInt32)),
                      Catch::Contains(" would hold table_rows * cols = 2147483647 * 1024 elements"));
  }
}

TEST_CASE("strided primitives refuse views past 2^40 elements or reaching past element 2^40", "[eager]") {
  const Family& copy = eager::strided_copy_family();
  // 2^20 in each of d0..d3: 2^80 elements, past int64.
  Problem p = eager::strided_problem("f32", {1, 1, 1, 1}, {0, {0, 0, 0, 1}}, std::nullopt, {0, {0, 0, 0, 1}});
  for (const char* d : {"d0", "d1", "d2", "d3"}) p.dims[d] = 1 << 20;
  CHECK_THROWS_WITH(copy.check_problem(p), Catch::Contains("the views hold d0 * d1 * d2 * d3 = 1048576 * 1048576 * "
                                                           "1048576 * 1048576 elements, more than 2^40"));
  // Two elements 2^40 apart in a: a's buffer would reach past element 2^40.
  const Problem far =
      eager::strided_problem("f32", {1, 1, 1, 2}, {0, {0, 0, 0, kTwo40}}, std::nullopt, {0, {0, 0, 0, 1}});
  CHECK_THROWS_WITH(copy.check_problem(far), Catch::Contains("a's view reaches past element 2^40"));
  // 2^40 elements 2^40 apart: (size - 1) * stride past int64.
  Problem wide = far;
  wide.dims["d3"] = kTwo40;
  CHECK_THROWS_WITH(copy.check_problem(wide), Catch::Contains("a's view reaches past element 2^40"));
}

}  // namespace templates_eager_primitive_test
