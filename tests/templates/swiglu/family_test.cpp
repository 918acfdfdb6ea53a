// SwiGLU gate families, host side: constraints, problem checks, workloads,
// launch plans, rendering, counts.
#include <catch2/catch.hpp>
#include <cmath>

#include "base/error.hpp"
#include "templates/render.hpp"
#include "templates/swiglu/swiglu.hpp"

namespace templates_swiglu_family_test {

using namespace ktune;
using namespace ktune::templates;

namespace {

const std::vector<const Family*> kFamilies = {&swiglu::forward_family(), &swiglu::backward_family()};

std::vector<float> floats_of(const HostBuffer& b, const std::vector<std::byte>& bytes) {
  std::vector<float> v(bytes.size() / size_of(b.dtype));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(value_at(b.dtype, bytes, i));
  return v;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace

TEST_CASE("swiglu families are registered under their names", "[swiglu][family]") {
  CHECK(&find_family("swiglu_fwd") == &swiglu::forward_family());
  CHECK(&find_family("swiglu_bwd") == &swiglu::backward_family());
}

TEST_CASE("swiglu constraints reject invalid configs with a reason", "[swiglu][family]") {
  const auto sm90 = DeviceLimits::for_arch("sm_90");
  for (const Family* f : kFamilies) {
    INFO(f->name());
    const Problem p32{"f32", {{"n", 4999}}}, p16{"bf16", {{"n", 4999}}};
    std::string why;

    SECTION("an access wider than 16 bytes") {
      Config c = f->default_config(p32);
      c.set("vec", 8);
      CHECK_FALSE(f->is_valid(c, p32, sm90, &why));
      CHECK_THAT(why, Catch::Contains("16 bytes"));
      why.clear();
      CHECK(f->is_valid(c, p16, sm90, &why));  // 8 bf16 are 16 bytes
      CHECK(why.empty());
    }
    SECTION("more threads than the device allows per block") {
      Config c = f->default_config(p32);
      c.set("threads", 1024);
      DeviceLimits small = sm90;
      small.max_threads_per_block = 512;
      CHECK(f->is_valid(c, p32, sm90));
      CHECK_FALSE(f->is_valid(c, p32, small, &why));
      CHECK_THAT(why, Catch::Contains("block limit"));
    }
    SECTION("a persistent grid of more than four waves") {
      Config c = f->default_config(p32);
      c.set("threads", 1024);
      c.set("blocks_per_sm", 16);
      CHECK_FALSE(f->is_valid(c, p32, sm90, &why));
      CHECK_THAT(why, Catch::Contains("four waves"));
      c.set("blocks_per_sm", 0);  // no cap is always allowed
      CHECK(f->is_valid(c, p32, sm90));
    }
    SECTION("more values in flight than a thread's registers hold") {
      // 1024 threads leave 64 registers a thread: 32 input values fit, 48 do not.
      Config c = f->default_config(p32);
      c.set("threads", 1024);
      c.set("vec", 4);
      c.set("unroll", 4);
      const bool backward = f->name() == "swiglu_bwd";  // three inputs: 48 values; forward two: 32
      CHECK(f->is_valid(c, p32, sm90, &why) == !backward);
      if (backward) CHECK_THAT(why, Catch::Contains("spill"));
      c.set("threads", 256);  // 255 registers a thread
      c.set("unroll", 8);
      CHECK(f->is_valid(c, p32, sm90));
    }
    SECTION("the defaults use 16-byte accesses") {
      CHECK(f->default_config(p32).at("vec") == 4);
      CHECK(f->default_config(p16).at("vec") == 8);
    }
  }
}

TEST_CASE("swiglu problems: bad ones give a clear error", "[swiglu][family]") {
  for (const Family* f : kFamilies) {
    INFO(f->name());
    CHECK_NOTHROW(f->check_problem(Problem{"bf16", {{"n", 1}}}));
    CHECK_THROWS_WITH(f->check_problem(Problem{"f16", {{"n", 8}}}), Catch::Contains("accepted: f32, bf16"));
    CHECK_THROWS_WITH(f->check_problem(Problem{"f32", {{"n", 0}}}), Catch::Contains("1..2^40"));
    CHECK_THROWS_WITH(f->check_problem(Problem{"f32", {}}), Catch::Contains("'n'"));
    CHECK_THROWS_WITH(f->check_problem(Problem{"f32", {{"n", 8}, {"rows", 4}}}),
                      Catch::Contains("unknown dimension 'rows'"));
    CHECK_THROWS_AS(f->make_workload(Problem{"f32", {{"n", -3}}}, 1), Error);
  }
}

TEST_CASE("swiglu_fwd workload: random inputs, h = silu(a) * b in the problem's dtype", "[swiglu][family]") {
  const Family& f = swiglu::forward_family();
  for (const char* dtype : {"f32", "bf16"}) {
    INFO(dtype);
    const Problem p{dtype, {{"n", 333}}};
    const Workload w = f.make_workload(p, 5);
    REQUIRE(w.buffers.size() == 3);
    CHECK(w.buffers[0].name == "a");
    CHECK(w.buffers[2].name == "h");
    CHECK(w.buffers[0].role == Role::kInput);
    CHECK(w.buffers[2].role == Role::kOutput);
    CHECK(w.buffers[2].tolerance == tolerance_for(dtype));
    for (const auto& b : w.buffers) {
      CHECK(b.dtype == (std::string(dtype) == "bf16" ? DType::kBF16 : DType::kF32));
      CHECK(b.elements() == 333);
    }
    const auto a = floats_of(w.buffers[0], w.buffers[0].bytes), b = floats_of(w.buffers[1], w.buffers[1].bytes);
    const auto h = floats_of(w.buffers[2], w.buffers[2].expected);
    // An independent float64 evaluation; bf16 expected values are rounded once.
    const double rel = std::string(dtype) == "bf16" ? 1.0 / 256 : 1e-6;
    for (std::size_t i = 0; i < h.size(); ++i) {
      const double e = a[i] * sigmoid(a[i]) * b[i];
      REQUIRE(h[i] == Approx(e).epsilon(rel).margin(1e-6));
    }
    CHECK(f.make_workload(p, 6).buffers[0].bytes != w.buffers[0].bytes);  // fresh data per seed
  }
}

TEST_CASE("swiglu_bwd workload: da and db from dh in the problem's dtype", "[swiglu][family]") {
  const Family& f = swiglu::backward_family();
  for (const char* dtype : {"f32", "bf16"}) {
    INFO(dtype);
    const Workload w = f.make_workload(Problem{dtype, {{"n", 257}}}, 9);
    REQUIRE(w.buffers.size() == 5);
    CHECK(w.buffers[2].name == "dh");
    CHECK(w.buffers[2].role == Role::kInput);
    CHECK(w.buffers[3].name == "da");
    CHECK(w.buffers[4].name == "db");
    CHECK(w.buffers[3].role == Role::kOutput);
    CHECK(w.buffers[4].role == Role::kOutput);
    const auto a = floats_of(w.buffers[0], w.buffers[0].bytes), b = floats_of(w.buffers[1], w.buffers[1].bytes);
    const auto dh = floats_of(w.buffers[2], w.buffers[2].bytes);
    const auto da = floats_of(w.buffers[3], w.buffers[3].expected), db = floats_of(w.buffers[4], w.buffers[4].expected);
    const double rel = std::string(dtype) == "bf16" ? 1.0 / 256 : 1e-5;
    for (std::size_t i = 0; i < a.size(); ++i) {
      const double s = sigmoid(a[i]);
      REQUIRE(db[i] == Approx(dh[i] * a[i] * s).epsilon(rel).margin(1e-6));
      REQUIRE(da[i] == Approx(dh[i] * b[i] * s * (1 + a[i] * (1 - s))).epsilon(rel).margin(1e-6));
    }
  }
}

TEST_CASE("swiglu plans: one launch whose grid covers n, or is capped per SM", "[swiglu][family]") {
  const auto device = DeviceLimits::for_arch("sm_80");
  const Family& fwd = swiglu::forward_family();
  const Family& bwd = swiglu::backward_family();
  const Problem p{"f32", {{"n", 4999}}};
  Config c = fwd.default_config(p);
  c.set("threads", 128);
  c.set("vec", 4);
  c.set("unroll", 2);
  c.set("blocks_per_sm", 0);
  const std::vector<std::uint64_t> three = {0x1000, 0x2000, 0x3000}, five = {0x1000, 0x2000, 0x3000, 0x4000, 0x5000};
  auto plan = fwd.plan(c, p, three, device);
  REQUIRE(plan.size() == 1);
  CHECK(plan[0].grid[0] == 5);  // ceil(4999 / (128 * 4 * 2))
  CHECK(plan[0].block[0] == 128);
  CHECK(plan[0].args.count() == 4);  // a, b, h, n
  CHECK(bwd.plan(c, p, five, device)[0].args.count() == 6);  // a, b, dh, da, db, n

  const Problem big{"f32", {{"n", 1LL << 28}}};
  c.set("blocks_per_sm", 2);
  CHECK(fwd.plan(c, big, three, device)[0].grid[0] == static_cast<unsigned>(2 * device.sm_count));
  c.set("blocks_per_sm", 0);
  CHECK(fwd.plan(c, big, three, device)[0].grid[0] == (1u << 28) / 1024);

  CHECK_THROWS_WITH(fwd.plan(c, p, five, device), Catch::Contains("5 buffer addresses given, the workload has 3"));
}

TEST_CASE("swiglu rendering: tunables and element type in the name expression", "[swiglu][family]") {
  const Family& f = swiglu::backward_family();
  const Problem p{"bf16", {{"n", 100}}};
  Config c = f.default_config(p);
  c.set("threads", 128);
  c.set("vec", 8);
  c.set("unroll", 4);
  const Rendered r = f.render(c, p);
  REQUIRE(r.kernels.size() == 1);
  CHECK(r.kernels[0] == "swiglu::swiglu_backward<128, 8, 4, kt::bf16>");
  CHECK(swiglu::forward_family().render(c, Problem{"f32", {{"n", 100}}}).kernels[0] ==
        "swiglu::swiglu_forward<128, 8, 4, float>");
  Config d = c;
  d.set("blocks_per_sm", c.at("blocks_per_sm") == 0 ? 4 : 0);  // a grid size, not a template parameter
  CHECK(f.render(d, p).source == r.source);
  d.set("vec", 4);
  CHECK(f.render(d, p).source != r.source);
}

TEST_CASE("swiglu byte and FLOP counts", "[swiglu][family]") {
  const Problem p32{"f32", {{"n", 1000}}}, p16{"bf16", {{"n", 1000}}};
  CHECK(swiglu::forward_family().bytes(p32) == 3 * 4 * 1000);
  CHECK(swiglu::forward_family().bytes(p16) == 3 * 2 * 1000);
  CHECK(swiglu::backward_family().bytes(p16) == 5 * 2 * 1000);
  CHECK(swiglu::backward_family().flops(p32) > swiglu::forward_family().flops(p32));
}

}  // namespace templates_swiglu_family_test
