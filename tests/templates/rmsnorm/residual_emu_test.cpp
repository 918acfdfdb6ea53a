// residual_rmsnorm_fwd and residual_rmsnorm_bwd run by the host emulation
// against the CPU reference (residual add, then RMSNorm): ragged shapes,
// f32 and bf16, h written over the stream or over the branch output, dh
// over the stream's gradient; and broken variants that must fail.
#include <catch2/catch.hpp>

#include "templates/emulated_plan.hpp"
#include "templates/rmsnorm/rmsnorm.hpp"

namespace templates_rmsnorm_residual_emu_test {

using namespace ktune;
using namespace ktune::templates;
using namespace ktune::templates::rmsnorm;

namespace {

Config layout(std::int64_t threads, std::int64_t row_threads, std::int64_t vec) {
  return Config({{"threads", threads}, {"row_threads", row_threads}, {"vec", vec}});
}
Config with_blocks(Config c, std::int64_t blocks, std::int64_t prefetch = 0) {
  c.set("blocks", blocks);
  c.set("prefetch", prefetch);
  return c;
}

// Buffer indices of the workloads (rmsnorm.hpp).
constexpr std::size_t kX = 0, kR = 1, kH = 3;                 // forward: x, r, w, h, y, rstd
constexpr std::size_t kDstream = 4, kDh = 5;                  // backward: h, w, rstd, dy, dstream, dh, dw, scratch

}  // namespace

TEST_CASE("residual_rmsnorm_fwd matches the reference on ragged shapes, in place or not", "[rmsnorm][emu]") {
  const Family& f = residual_forward_family();
  // 37 rows leave the last block ragged; rows of 250 and 999 end inside a thread's last vector.
  const Problem f32{"f32", {{"rows", 37}, {"dim", 250}}};
  const Problem bf16{"bf16", {{"rows", 37}, {"dim", 1000}}};
  const Problem odd{"bf16", {{"rows", 13}, {"dim", 999}}};
  SECTION("separate h") {
    test::check_emulated_plan(f, layout(64, 16, 2), f32);
    test::check_emulated_plan(f, layout(128, 64, 8), bf16);
    test::check_emulated_plan(f, layout(256, 256, 1), odd);
  }
  SECTION("h over the stream x") {
    test::check_emulated_plan(f, layout(128, 32, 2), f32, {{kH, kX}});
    test::check_emulated_plan(f, layout(128, 64, 8), bf16, {{kH, kX}});
  }
  SECTION("h over the branch output r") { test::check_emulated_plan(f, layout(128, 32, 1), odd, {{kH, kR}}); }
  SECTION("a broken residual add fails") {
    CHECK(test::broken_error(f, layout(128, 64, 8), bf16,
                             "kt::to_float(xv[i].v[k]) + kt::to_float(rv.v[k])",
                             "kt::to_float(xv[i].v[k]) - kt::to_float(rv.v[k])") > 1e-2);
  }
}

TEST_CASE("residual_rmsnorm_bwd matches the reference on ragged shapes, in place or not", "[rmsnorm][emu]") {
  const Family& f = residual_backward_family();
  // 301 rows in groups of 4 (or 2) over 64 blocks: blocks take one to three groups, the last ragged.
  const Problem f32{"f32", {{"rows", 301}, {"dim", 250}}};
  const Problem bf16{"bf16", {{"rows", 67}, {"dim", 1000}}};
  SECTION("separate dh") {
    test::check_emulated_plan(f, with_blocks(layout(64, 16, 2), 64), f32);
    test::check_emulated_plan(f, with_blocks(layout(128, 64, 8), 64), bf16);
  }
  SECTION("dh over the stream's gradient") {
    test::check_emulated_plan(f, with_blocks(layout(128, 32, 2), 64), f32, {{kDh, kDstream}});
    test::check_emulated_plan(f, with_blocks(layout(256, 256, 4), 64), bf16, {{kDh, kDstream}});
  }
  SECTION("the next group's rows loaded ahead, dh separate and over the stream's gradient") {
    test::check_emulated_plan(f, with_blocks(layout(64, 16, 2), 64, 1), f32);
    test::check_emulated_plan(f, with_blocks(layout(128, 32, 2), 64, 1), f32, {{kDh, kDstream}});
    test::check_emulated_plan(f, with_blocks(layout(128, 64, 8), 64, 1), bf16, {{kDh, kDstream}});
    // dstream loaded with x and dy (prefetch 2), not after the reduction.
    test::check_emulated_plan(f, with_blocks(layout(64, 16, 2), 64, 2), f32);
    test::check_emulated_plan(f, with_blocks(layout(128, 32, 2), 64, 2), f32, {{kDh, kDstream}});
    test::check_emulated_plan(f, with_blocks(layout(128, 64, 8), 64, 2), bf16, {{kDh, kDstream}});
  }
  SECTION("dropping the stream's gradient fails") {
    CHECK(test::broken_error(f, with_blocks(layout(128, 64, 8), 64), bf16, "RESIDUAL ? kt::to_float(sv.v[k]) + g : g",
                             "g") > 1e-2);
  }
}

}  // namespace templates_rmsnorm_residual_emu_test
