// Row softmax families, host side: problems (the causal form), constraints,
// defaults, rendering, workloads, launch plans, counts.
#include "templates/softmax/softmax.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "base/error.hpp"
#include "templates/render.hpp"

namespace templates_softmax_family_test {

using namespace ktune;
using namespace ktune::templates;
using namespace ktune::templates::softmax;

namespace {

const std::vector<const Family*> kFamilies = {&forward_family(), &backward_family()};

Config layout(std::int64_t threads, std::int64_t row_threads, std::int64_t vec) {
  return Config({{"threads", threads}, {"row_threads", row_threads}, {"vec", vec}});
}
Problem problem(const char* dtype, std::int64_t rows, std::int64_t cols, std::int64_t causal) {
  return Problem{dtype, {{"rows", rows}, {"cols", cols}, {"causal", causal}}};
}
std::string why_invalid(const Family& f, const Config& c, const Problem& p) {
  std::string why;
  CHECK_FALSE(f.is_valid(c, p, DeviceLimits::for_arch("sm_90"), &why));
  return why;
}

}  // namespace

TEST_CASE("softmax families are registered and reject bad problems with what is accepted", "[softmax][family]") {
  CHECK(&find_family("softmax_fwd") == &forward_family());
  CHECK(&find_family("softmax_bwd") == &backward_family());
  for (const Family* f : kFamilies) {
    INFO(f->name());
    CHECK_NOTHROW(f->check_problem(problem("bf16", 4096, 1024, 1)));
    CHECK_NOTHROW(f->check_problem(problem("f32", 3, kMaxCols, 0)));
    CHECK_THROWS_WITH(f->check_problem(problem("f16", 4, 64, 0)), Catch::Contains("accepted: f32, bf16"));
    CHECK_THROWS_WITH(f->check_problem(problem("f32", 4, kMaxCols + 1, 0)),
                      Catch::Contains("'cols' must be in 1..16384"));
    CHECK_THROWS_WITH(f->check_problem(problem("f32", 0, 64, 0)), Catch::Contains("'rows' (tokens) must be"));
    CHECK_THROWS_WITH(f->check_problem(Problem{"f32", {{"rows", 4}, {"cols", 64}}}),
                      Catch::Contains("'causal' must be given, 0"));
    CHECK_THROWS_WITH(f->check_problem(problem("f32", 4, 64, 2)), Catch::Contains("'causal' must be given, 0"));
    CHECK_THROWS_WITH(f->check_problem(Problem{"f32", {{"rows", 4}, {"cols", 64}, {"causal", 0}, {"seq", 4}}}),
                      Catch::Contains("unknown dimension 'seq'; accepted: rows, cols, causal"));
    CHECK_THROWS_WITH(f->check_problem(problem("f32", 100, 64, 1)),
                      Catch::Contains("rows (100) must be a multiple of cols (64)"));
    CHECK_THROWS_AS(f->make_workload(problem("f32", 100, 64, 1), 1), Error);
  }
}

TEST_CASE("softmax constraints reject configs before compiling, saying why", "[softmax][family]") {
  const Family& fwd = forward_family();
  const Family& bwd = backward_family();
  const Problem f32 = problem("f32", 64, 1024, 0);
  CHECK(fwd.is_valid(layout(256, 32, 4), f32, DeviceLimits::for_arch("sm_90")));
  CHECK_THAT(why_invalid(fwd, layout(256, 32, 8), f32), Catch::Contains("at most 16 bytes"));
  CHECK_THAT(why_invalid(fwd, layout(256, 32, 4), problem("f32", 64, 1030, 0)),
             Catch::Contains("not a multiple of vec 4"));
  CHECK_THAT(why_invalid(fwd, layout(256, 8, 4), f32), Catch::Contains("128 elements of its row in registers"));
  // The backward holds y and dy: 32 elements each (8 vectors) take about 104 registers, over the 64 of a
  // 1024-thread block; the forward's x alone about 64.
  const Problem wide = problem("f32", 64, 16384, 0);
  CHECK(fwd.is_valid(layout(1024, 512, 4), wide, DeviceLimits::for_arch("sm_90")));
  CHECK_THAT(why_invalid(fwd, layout(1024, 32, 1), problem("f32", 37, 1000, 0)), Catch::Contains("it would spill"));
  CHECK_THAT(why_invalid(bwd, layout(1024, 512, 4), wide), Catch::Contains("it would spill"));
  CHECK(bwd.is_valid(layout(512, 512, 4), wide, DeviceLimits::for_arch("sm_90")));
  CHECK_THAT(why_invalid(bwd, layout(512, 32, 1), problem("f32", 37, 1000, 0)), Catch::Contains("it would spill"));
}

TEST_CASE("softmax defaults are valid for every accepted row length", "[softmax][family]") {
  for (const Family* f : kFamilies)
    for (const char* dtype : {"f32", "bf16"})
      for (std::int64_t cols : std::vector<std::int64_t>{1, 3, 37, 64, 77, 100, 1000, 1024, 4097, 10000, kMaxCols}) {
        const Problem p = problem(dtype, 2 * cols, cols, cols % 2);
        INFO(f->name() << " " << p.key());
        const Config c = f->default_config(p);
        CHECK_NOTHROW(f->space().check_member(c));
        std::string why;
        CHECK(f->is_valid(c, p, DeviceLimits::for_arch("sm_80"), &why));
        CHECK(why.empty());
        if (cols % 8 == 0) CHECK(c.at("vec") == (std::string(dtype) == "bf16" ? 8 : 4));  // the widest access
      }
}

TEST_CASE("softmax rendering: the row share and the mask are template arguments", "[softmax][family]") {
  const Problem p = problem("f32", 8, 1024, 0);
  const Rendered r = forward_family().render(layout(256, 64, 4), p);
  REQUIRE(r.kernels.size() == 1);
  CHECK(r.kernels[0] == "softmax::softmax_fwd<256, 64, 4, 4, false, float>");
  CHECK(backward_family().render(layout(128, 32, 8), problem("bf16", 300, 100, 1)).kernels[0] ==
        "softmax::softmax_bwd<128, 32, 8, 1, true, kt::bf16>");
  CHECK(forward_family().render(layout(256, 64, 4), problem("f32", 999, 1000, 0)).source == r.source);
}

TEST_CASE("softmax workloads: rows of y sum to one over the columns they see, 0 beyond", "[softmax][family]") {
  for (const char* dtype : {"f32", "bf16"}) {
    INFO(dtype);
    const Problem p = problem(dtype, 12, 4, 1);  // three heads of a 4-token causal block
    const Workload w = forward_family().make_workload(p, 3);
    REQUIRE(w.buffers.size() == 2);
    CHECK(w.buffers[0].name == "x");
    CHECK(w.buffers[1].name == "y");
    CHECK(w.buffers[1].role == Role::kOutput);
    CHECK(w.buffers[1].tolerance == tolerance_for(dtype));
    const DType t = w.buffers[1].dtype;
    for (int r = 0; r < 12; ++r) {
      double sum = 0;
      for (int c = 0; c < 4; ++c) {
        const double y = value_at(t, w.buffers[1].expected, static_cast<std::size_t>(r * 4 + c));
        if (c > r % 4) CHECK(y == 0.0);
        sum += y;
      }
      CHECK(sum == Approx(1.0).epsilon(1e-2));
    }
    // The scale is applied: in row 1 of each block, y1 / y0 = exp(scale * (x1 - x0)).
    const double x0 = value_at(t, w.buffers[0].bytes, 4), x1 = value_at(t, w.buffers[0].bytes, 5);
    const double y0 = value_at(t, w.buffers[1].expected, 4), y1 = value_at(t, w.buffers[1].expected, 5);
    CHECK(y1 / y0 == Approx(std::exp(kWorkloadScale * (x1 - x0))).epsilon(2e-2));
  }
  const Workload b = backward_family().make_workload(problem("f32", 6, 3, 1), 3);
  REQUIRE(b.buffers.size() == 3);
  CHECK(b.buffers[0].name == "y");
  CHECK(b.buffers[1].name == "dy");
  CHECK(b.buffers[2].name == "dx");
  for (int r = 0; r < 6; ++r)
    for (int c = r % 3 + 1; c < 3; ++c) CHECK(value_at(DType::kF32, b.buffers[2].expected, r * 3 + c) == 0.0);
}

TEST_CASE("softmax plans: one row group per block, the scale and alignment travel", "[softmax][family]") {
  const auto device = DeviceLimits::for_arch("sm_90");
  const Problem p = problem("f32", 301, 1000, 0);
  const auto plan =
      forward_family().plan(layout(128, 32, 4), p, ForwardArgs{.x = 0x1000, .y = 0x2000, .scale = 0.5f}, device);
  REQUIRE(plan.size() == 1);
  CHECK(plan[0].grid[0] == 76);  // ceil(301 / 4 rows per block)
  CHECK(plan[0].block[0] == 128);
  CHECK(plan[0].args.count() == 5);  // x, y, rows, cols, scale
  float scale = 0;
  std::memcpy(&scale, plan[0].args.bytes().data() + plan[0].args.offsets()[4], sizeof(float));
  CHECK(scale == 0.5f);
  CHECK(backward_family()
            .plan(layout(128, 32, 4), p, BackwardArgs{.y = 0x1000, .dy = 0x2000, .dx = 0x2000}, device)
            .size() == 1);  // in place
  CHECK_THROWS_WITH(
      backward_family().plan(layout(128, 32, 4), p, BackwardArgs{.y = 0x1000, .dy = 0x2004, .dx = 0x3000}, device),
      Catch::Contains("buffer 'dy'") && Catch::Contains("not aligned to the 16 bytes"));
  CHECK_THROWS_WITH(static_cast<const Family&>(forward_family()).plan(layout(128, 32, 4), p,
                                                                      std::vector<std::uint64_t>{0x1000}, device),
                    Catch::Contains("x, y"));
}

TEST_CASE("softmax counts: the causal mask halves the work", "[softmax][family]") {
  const Problem full = problem("f32", 1024, 1024, 0), causal = problem("f32", 1024, 1024, 1);
  CHECK(forward_family().flops(causal) == Approx(forward_family().flops(full) * 1025 / 2048));
  CHECK(forward_family().bytes(full) == 2.0 * 4 * 1024 * 1024);
  CHECK(backward_family().bytes(problem("bf16", 10, 100, 0)) == 3.0 * 2 * 1000);
  CHECK(backward_family().flops(full) > 0);
}

}  // namespace templates_softmax_family_test
