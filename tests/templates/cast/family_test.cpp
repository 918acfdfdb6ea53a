// Cast families, host side: registration, problem checks, constraints,
// workloads (round to nearest even, ties included), plans, rendering, counts.
#include <catch2/catch.hpp>
#include <bit>
#include <cstring>

#include "base/error.hpp"
#include "templates/cast/cast.hpp"
#include "templates/render.hpp"

namespace templates_cast_family_test {

using namespace ktune;
using namespace ktune::templates;

namespace {

const std::vector<const Family*> kFamilies = {&cast::to_bf16_family(), &cast::to_f32_family()};
const Problem kRagged{"bf16", {{"n", 4999}}};

template <class T>
std::vector<T> values_of(const std::vector<std::byte>& bytes) {
  std::vector<T> v(bytes.size() / sizeof(T));
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

}  // namespace

TEST_CASE("cast families are registered under their names", "[cast][family]") {
  CHECK(&find_family("cast_to_bf16") == &cast::to_bf16_family());
  CHECK(&find_family("cast_to_f32") == &cast::to_f32_family());
}

TEST_CASE("cast reference rounds to nearest even and round-trips exactly", "[cast]") {
  // 1 + 2^-8 is halfway between bf16 1 and 1 + 2^-7: ties go to the even mantissa (1);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: to 1 + 2^-6.
  const std::vector<float> x = {1.0f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f, -2.5f};
  std::vector<std::uint16_t> y(x.size());
  cast::cast_to_bf16(x.data(), y.data(), 5);
  CHECK(y == std::vector<std::uint16_t>{0x3f80, 0x3f80, 0x3f82, 0x3f81, 0xc020});
  std::vector<float> back(x.size());
  cast::cast_to_f32(y.data(), back.data(), 5);
  CHECK(back == std::vector<float>{1.0f, 1.0f, 1.0f + 0x1p-6f, 1.0f + 0x1p-7f, -2.5f});
}

TEST_CASE("cast problems: bad ones give one clear error", "[cast][family]") {
  for (const Family* f : kFamilies) {
    INFO(f->name());
    CHECK_NOTHROW(f->check_problem(Problem{"bf16", {{"n", 1}}}));
    CHECK_THROWS_WITH(f->check_problem(Problem{"f32", {{"n", 8}}}), Catch::Contains("accepted: bf16"));
    CHECK_THROWS_WITH(f->check_problem(Problem{"bf16", {{"n", 0}}}), Catch::Contains("1..2^40"));
    CHECK_THROWS_WITH(f->check_problem(Problem{"bf16", {}}), Catch::Contains("'n'"));
    CHECK_THROWS_WITH(f->check_problem(Problem{"bf16", {{"n", 8}, {"to_bf16", 1}}}),
                      Catch::Contains("unknown dimension 'to_bf16'; accepted: n"));
    CHECK_THROWS_AS(f->make_workload(Problem{"bf16", {{"n", -3}}}, 1), Error);
  }
}

TEST_CASE("cast constraints reject invalid configs with a reason", "[cast][family]") {
  const auto sm90 = DeviceLimits::for_arch("sm_90");
  for (const Family* f : kFamilies) {
    INFO(f->name());
    std::string why;
    Config c = f->default_config(kRagged);
    CHECK(f->is_valid(c, kRagged, sm90, &why));
    CHECK(why.empty());
    SECTION("more threads than the device allows per block") {
      c.set("threads", 1024);
      DeviceLimits small = sm90;
      small.max_threads_per_block = 512;
      CHECK(f->is_valid(c, kRagged, sm90));
      CHECK_FALSE(f->is_valid(c, kRagged, small, &why));
      CHECK_THAT(why, Catch::Contains("block limit"));
    }
    SECTION("more values in flight than a 1024-thread block's registers hold") {
      // 1024 threads leave 64 registers a thread, 32 beside the values: 64 values do
      // not fit in either direction (bf16 values become fp32 registers), 32 do.
      c.set("threads", 1024);
      c.set("vec", 8);
      c.set("unroll", 8);
      CHECK_FALSE(f->is_valid(c, kRagged, sm90, &why));
      CHECK_THAT(why, Catch::Contains("spill"));
      c.set("unroll", 4);
      CHECK(f->is_valid(c, kRagged, sm90));
      c.set("threads", 512);  // 128 registers a thread
      c.set("unroll", 8);
      CHECK(f->is_valid(c, kRagged, sm90));
    }
    SECTION("a persistent grid of more than four waves") {
      c.set("threads", 1024);
      c.set("blocks_per_sm", 16);
      CHECK_FALSE(f->is_valid(c, kRagged, sm90, &why));
      CHECK_THAT(why, Catch::Contains("four waves"));
    }
  }
}

TEST_CASE("cast workloads: the destination is the reference's, checked exactly", "[cast][family]") {
  const Workload w = cast::to_bf16_family().make_workload(kRagged, 5);
  REQUIRE(w.buffers.size() == 2);
  CHECK(w.buffers[0].name == "x");
  CHECK(w.buffers[0].dtype == DType::kF32);
  CHECK(w.buffers[1].name == "y");
  CHECK(w.buffers[1].dtype == DType::kBF16);
  CHECK(w.buffers[1].role == Role::kOutput);
  CHECK(w.buffers[1].tolerance == 0.0);  // one ulp off would fail
  const auto x = values_of<float>(w.buffers[0].bytes);
  const auto y = values_of<std::uint16_t>(w.buffers[1].expected);
  REQUIRE(x.size() == 4999);
  int ties = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const auto bits = std::bit_cast<std::uint32_t>(x[i]);
    REQUIRE(y[i] == float_to_bf16_bits(x[i]));
    if ((bits & 0xffffu) == 0x8000u) ++ties;
  }
  CHECK(ties >= 4999 / 8);  // the tie rule is exercised
  CHECK(cast::to_bf16_family().make_workload(kRagged, 6).buffers[0].bytes != w.buffers[0].bytes);

  const Workload b = cast::to_f32_family().make_workload(kRagged, 5);
  REQUIRE(b.buffers.size() == 2);
  CHECK(b.buffers[0].dtype == DType::kBF16);
  CHECK(b.buffers[1].dtype == DType::kF32);
  const auto bx = values_of<std::uint16_t>(b.buffers[0].bytes);
  const auto by = values_of<float>(b.buffers[1].expected);
  for (std::size_t i = 0; i < bx.size(); ++i)
    REQUIRE(std::bit_cast<std::uint32_t>(by[i]) == std::uint32_t{bx[i]} << 16);
}

TEST_CASE("cast plans: one launch covering n, capped per SM, overlapping buffers refused", "[cast][family]") {
  const auto device = DeviceLimits::for_arch("sm_80");
  const auto& f = cast::to_bf16_family();
  Config c = f.default_config(kRagged);
  c.set("threads", 128);
  c.set("vec", 4);
  c.set("unroll", 2);
  auto plan = f.plan(c, kRagged, cast::Args{.x = 0x100000, .y = 0x200000}, device);
  REQUIRE(plan.size() == 1);
  CHECK(plan[0].grid[0] == 5);  // ceil(4999 / (128 * 4 * 2))
  CHECK(plan[0].block[0] == 128);
  CHECK(plan[0].args.count() == 3);  // x, y, n
  c.set("blocks_per_sm", 2);
  CHECK(f.plan(c, Problem{"bf16", {{"n", 1LL << 28}}}, cast::Args{.x = 0, .y = 1LL << 31}, device)[0].grid[0] ==
        static_cast<unsigned>(2 * device.sm_count));
  // y starts inside x's 4999 * 4 bytes: refused, in both directions.
  CHECK_THROWS_WITH(f.plan(c, kRagged, cast::Args{.x = 0x100000, .y = 0x100000 + 4 * 4998}, device),
                    Catch::Contains("overlap"));
  CHECK_THROWS_WITH(cast::to_f32_family().plan(c, kRagged, cast::Args{.x = 0x100000 + 2 * 4998, .y = 0x100000}, device),
                    Catch::Contains("cannot run in place"));
  CHECK_NOTHROW(f.plan(c, kRagged, cast::Args{.x = 0x100000, .y = 0x100000 + 4 * 4999}, device));
  CHECK_THROWS_WITH(static_cast<const Family&>(f).plan(c, kRagged, std::vector<std::uint64_t>{1, 2, 3}, device),
                    Catch::Contains("3 buffer addresses given, the workload has 2 (x, y)"));
}

TEST_CASE("cast rendering: the kernel's name expression carries the tunables and both types", "[cast][family]") {
  Config c = cast::to_bf16_family().default_config(kRagged);
  c.set("threads", 128);
  c.set("vec", 4);
  c.set("unroll", 8);
  const Rendered r = cast::to_bf16_family().render(c, kRagged);
  REQUIRE(r.kernels.size() == 1);
  CHECK(r.kernels[0] == "cast::convert<128, 4, 8, float, kt::bf16>");
  CHECK(cast::to_f32_family().render(c, kRagged).kernels[0] == "cast::convert<128, 4, 8, kt::bf16, float>");
  Config d = c;
  d.set("blocks_per_sm", 4);  // a grid size, not a template parameter
  CHECK(cast::to_bf16_family().render(d, kRagged).source == r.source);
}

TEST_CASE("cast counts: no FLOPs, 6 bytes an element", "[cast][family]") {
  for (const Family* f : kFamilies) {
    CHECK(f->flops(kRagged) == 0.0);
    CHECK(f->bytes(kRagged) == 6.0 * 4999);
  }
}

}  // namespace templates_cast_family_test
