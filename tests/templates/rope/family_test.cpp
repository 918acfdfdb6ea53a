// RoPE families, host side: problems, constraints, defaults, rendering,
// workloads with their reference, launch plans, counts.
#include "templates/rope/rope.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "base/error.hpp"
#include "templates/render.hpp"

namespace templates_rope_family_test {

using namespace ktune;
using namespace ktune::templates;

namespace {

const std::vector<const Family*> kFamilies = {&rope::forward_family(), &rope::backward_family()};

Problem problem(const char* dtype, std::int64_t head_dim, std::int64_t heads = 4, std::int64_t seq = 32,
                std::int64_t tokens = 77) {
  return Problem{dtype, {{"head_dim", head_dim}, {"heads", heads}, {"seq", seq}, {"tokens", tokens}}};
}

Config config(std::int64_t threads, std::int64_t vec, std::int64_t heads_per_thread, std::int64_t blocks_per_sm = 0) {
  return Config({{"threads", threads}, {"vec", vec}, {"heads_per_thread", heads_per_thread},
                 {"blocks_per_sm", blocks_per_sm}});
}

std::string why_invalid(const Family& f, const Config& c, const Problem& p) {
  std::string why;
  CHECK_FALSE(f.is_valid(c, p, DeviceLimits::for_arch("sm_90"), &why));
  return why;
}

std::vector<double> values_of(DType t, const std::vector<std::byte>& bytes) {
  std::vector<double> v(bytes.size() / size_of(t));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = value_at(t, bytes, i);
  return v;
}

}  // namespace

TEST_CASE("rope families are registered under their names", "[rope][family]") {
  CHECK(&find_family("rope_fwd") == &rope::forward_family());
  CHECK(&find_family("rope_bwd") == &rope::backward_family());
}

TEST_CASE("rope problems: bad ones give a clear error saying what is accepted", "[rope][family]") {
  for (const Family* f : kFamilies) {
    INFO(f->name());
    CHECK_NOTHROW(f->check_problem(problem("bf16", 80)));
    CHECK_NOTHROW(f->check_problem(problem("f32", 2, 1, 1, 1)));
    CHECK_NOTHROW(f->check_problem(problem("f32", rope::kMaxHeadDim)));
    CHECK_THROWS_WITH(f->check_problem(problem("f16", 64)), Catch::Contains("accepted: f32, bf16"));
    CHECK_THROWS_WITH(f->check_problem(problem("f32", 63)),
                      Catch::Contains("head_dim 63 is not supported; accepted: even values in 2..512"));
    CHECK_THROWS_WITH(f->check_problem(problem("f32", rope::kMaxHeadDim + 2)),
                      Catch::Contains("even values in 2..512"));
    CHECK_THROWS_WITH(f->check_problem(problem("f32", 64, 0)), Catch::Contains("'heads' must be given, at least 1"));
    CHECK_THROWS_WITH(f->check_problem(problem("f32", 64, 4, 32, 0)), Catch::Contains("'tokens' must be"));
    CHECK_THROWS_WITH(f->check_problem(Problem{"f32", {{"head_dim", 64}, {"heads", 4}, {"tokens", 8}}}),
                      Catch::Contains("'seq' must be given"));
    Problem extra = problem("f32", 64);
    extra.dims["batch"] = 4;
    CHECK_THROWS_WITH(f->check_problem(extra),
                      Catch::Contains("unknown dimension 'batch'; accepted: tokens, heads, head_dim, seq"));
    CHECK_THROWS_WITH(f->check_problem(problem("f32", 64, 1 << 16, 32, 1 << 16)),
                      Catch::Contains("tokens * heads must be at most 2^31-1"));
    CHECK_THROWS_AS(f->make_workload(problem("f32", 7), 1), Error);
  }
}

TEST_CASE("rope constraints reject invalid configs with a reason", "[rope][family]") {
  const auto sm90 = DeviceLimits::for_arch("sm_90");
  for (const Family* f : kFamilies) {
    INFO(f->name());
    const Problem p32 = problem("f32", 64), p16 = problem("bf16", 64);
    CHECK(f->is_valid(config(256, 4, 4), p32, sm90));

    // An access wider than 16 bytes: 8 floats, but 8 bf16 are fine.
    CHECK_THAT(why_invalid(*f, config(256, 8, 4), p32), Catch::Contains("16 bytes"));
    CHECK(f->is_valid(config(256, 8, 4), p16, sm90));
    // A vector across two heads: 18 = 4 * 4 + 2.
    CHECK_THAT(why_invalid(*f, config(256, 4, 1), problem("f32", 18)), Catch::Contains("straddle two heads"));
    CHECK(f->is_valid(config(256, 2, 1), problem("f32", 18), sm90));
    // A head's threads must fit in one block: 512 / 2 = 256 lanes.
    CHECK_THAT(why_invalid(*f, config(128, 2, 1), problem("f32", 512)), Catch::Contains("do not fit in a block"));
    CHECK(f->is_valid(config(256, 2, 1), problem("f32", 512), sm90));
    // Idle threads: 80 / 2 = 40 lanes leave 24 of 64 threads idle, 8 of 128.
    CHECK_THAT(why_invalid(*f, config(64, 2, 1), problem("bf16", 80)), Catch::Contains("24 of the block's 64"));
    CHECK(f->is_valid(config(128, 2, 1), problem("bf16", 80), sm90));
    // More heads per table load than the problem has.
    CHECK_THAT(why_invalid(*f, config(256, 4, 8), problem("f32", 64, 3)), Catch::Contains("3 heads"));
    CHECK(f->is_valid(config(256, 4, 4), problem("f32", 64, 3), sm90));
    CHECK(f->is_valid(config(256, 4, 1), problem("f32", 64, 1), sm90));
    // Registers: 1024 threads leave 64 a thread; 16 heads of 4 floats do not fit, 4 heads do.
    const Problem many = problem("f32", 64, 32);
    CHECK_THAT(why_invalid(*f, config(1024, 4, 16), many), Catch::Contains("it would spill"));
    CHECK(f->is_valid(config(1024, 4, 4), many, sm90));
    CHECK(f->is_valid(config(256, 4, 16), many, sm90));  // 255 registers a thread
    // bf16 values take a register each too: 16 heads of 8 overflow the 128 of 512 threads.
    const Problem many16 = problem("bf16", 64, 32);
    CHECK_THAT(why_invalid(*f, config(512, 8, 16), many16), Catch::Contains("it would spill"));
    CHECK(f->is_valid(config(512, 8, 8), many16, sm90));
    CHECK(f->is_valid(config(256, 8, 16), many16, sm90));
    // The device's block limit.
    DeviceLimits small = sm90;
    small.max_threads_per_block = 512;
    std::string why;
    CHECK_FALSE(f->is_valid(config(1024, 4, 1), p32, small, &why));
    CHECK_THAT(why, Catch::Contains("block limit"));
    // A persistent grid of more than four waves.
    CHECK_THAT(why_invalid(*f, config(1024, 4, 1, 16), p32), Catch::Contains("four waves"));
    CHECK(f->is_valid(config(1024, 4, 1, 8), p32, sm90));
  }
}

TEST_CASE("rope defaults are valid for every accepted head dim and use the widest access", "[rope][family]") {
  for (const Family* f : kFamilies)
    for (const char* dtype : {"f32", "bf16"})
      for (std::int64_t head_dim = 2; head_dim <= rope::kMaxHeadDim; head_dim += 2)
        for (std::int64_t heads : {1, 3, 12, 25}) {
          const Problem p = problem(dtype, head_dim, heads, 1024, 4096);
          INFO(f->name() << " " << p.key());
          const Config c = f->default_config(p);
          CHECK_NOTHROW(f->space().check_member(c));
          for (const char* arch : {"sm_80", "sm_86", "sm_90"}) {
            std::string why;
            CHECK(f->is_valid(c, p, DeviceLimits::for_arch(arch), &why));
            CHECK(why.empty());
          }
          const std::int64_t widest = std::string(dtype) == "bf16" ? 8 : 4;
          if (head_dim % widest == 0) CHECK(c.at("vec") == widest);
          CHECK(c.at("heads_per_thread") == (heads == 1 ? 1 : heads == 3 ? 2 : 4));
          CHECK(c.at("blocks_per_sm") == 0);
          if (head_dim <= 256 && head_dim % widest == 0) CHECK(c.at("threads") == 256);
        }
}

TEST_CASE("rope rendering: tunables, head dim and element type in the name expression", "[rope][family]") {
  const Family& fwd = rope::forward_family();
  const Family& bwd = rope::backward_family();
  const Problem p = problem("bf16", 80, 5, 16, 37);
  const Rendered r = fwd.render(config(128, 8, 2), p);
  REQUIRE(r.kernels.size() == 1);
  CHECK(r.kernels[0] == "rope::rope_forward<128, 8, 2, 80, kt::bf16>");
  CHECK(bwd.render(config(256, 4, 4), problem("f32", 64)).kernels[0] == "rope::rope_backward<256, 4, 4, 64, float>");
  // The grid cap and the problem's other dims are run-time: one binary serves them.
  CHECK(fwd.render(config(128, 8, 2, 4), problem("bf16", 80, 32, 1024, 4096)).source == r.source);
  CHECK(fwd.render(config(128, 8, 2), problem("bf16", 64, 5, 16, 37)).source != r.source);
  CHECK(fwd.render(config(128, 4, 2), p).source != r.source);
}

TEST_CASE("rope workloads: fp32 tables, fresh inputs per seed, the rotation expected in the problem's dtype",
          "[rope][family]") {
  const std::int64_t head_dim = 80, heads = 3, seq = 16, tokens = 37, half = head_dim / 2;
  for (const Family* f : kFamilies) {
    const bool backward = f->name() == "rope_bwd";
    for (const char* dtype : {"f32", "bf16"}) {
      INFO(f->name() << " " << dtype);
      const Problem p = problem(dtype, head_dim, heads, seq, tokens);
      const Workload w = f->make_workload(p, 5);
      REQUIRE(w.buffers.size() == 4);
      const DType t = std::string(dtype) == "bf16" ? DType::kBF16 : DType::kF32;
      const char* names[] = {backward ? "dy" : "x", "cos", "sin", backward ? "dx" : "y"};
      for (std::size_t i = 0; i < 4; ++i) CHECK(w.buffers[i].name == names[i]);
      CHECK(w.buffers[0].role == Role::kInput);
      CHECK(w.buffers[0].dtype == t);
      CHECK(w.buffers[0].elements() == static_cast<std::size_t>(tokens * heads * head_dim));
      CHECK(w.buffers[1].dtype == DType::kF32);
      CHECK(w.buffers[1].elements() == static_cast<std::size_t>(seq * half));
      CHECK(w.buffers[3].role == Role::kOutput);
      CHECK(w.buffers[3].dtype == t);
      CHECK(w.buffers[3].tolerance == tolerance_for(dtype));
      CHECK(f->make_workload(p, 6).buffers[0].bytes != w.buffers[0].bytes);

      // An independent fp64 evaluation from the angles themselves; the
      // workload's tables are them rounded to fp32.
      const auto in = values_of(t, w.buffers[0].bytes), out = values_of(t, w.buffers[3].expected);
      const auto cos_t = values_of(DType::kF32, w.buffers[1].bytes), sin_t = values_of(DType::kF32, w.buffers[2].bytes);
      const double rel = t == DType::kBF16 ? 1.0 / 128 : 1e-6;
      for (std::int64_t tok = 0; tok < tokens; ++tok)
        for (std::int64_t h = 0; h < heads; ++h)
          for (std::int64_t i = 0; i < half; ++i) {
            const double angle = static_cast<double>(tok % seq) * std::pow(rope::kTheta, -2.0 * i / head_dim);
            const std::size_t table = static_cast<std::size_t>(tok % seq * half + i);
            REQUIRE(cos_t[table] == Approx(std::cos(angle)).margin(1e-7));
            REQUIRE(sin_t[table] == Approx(std::sin(angle)).margin(1e-7));
            const double s = backward ? -std::sin(angle) : std::sin(angle), c = std::cos(angle);
            const auto at = static_cast<std::size_t>((tok * heads + h) * head_dim + 2 * i);
            REQUIRE(out[at] == Approx(in[at] * c - in[at + 1] * s).epsilon(rel).margin(rel));
            REQUIRE(out[at + 1] == Approx(in[at] * s + in[at + 1] * c).epsilon(rel).margin(rel));
          }
      // Token 16 is position 0 of the second sequence: unrotated.
      for (std::int64_t e = 0; e < heads * head_dim; ++e)
        CHECK(out[static_cast<std::size_t>(seq * heads * head_dim + e)] ==
              in[static_cast<std::size_t>(seq * heads * head_dim + e)]);
    }
  }
}

TEST_CASE("rope plans: one launch, a slot per work item unless capped per SM", "[rope][family]") {
  const auto device = DeviceLimits::for_arch("sm_80");
  const std::vector<std::uint64_t> four = {0x1000, 0x2000, 0x3000, 0x4000};
  for (const Family* f : kFamilies) {
    INFO(f->name());
    // bf16, head_dim 80, vec 8: 10 threads a head, 12 slots in 128 threads;
    // 5 heads in groups of 2: 3 items per token, 111 for 37 tokens.
    const Problem p = problem("bf16", 80, 5, 16, 37);
    auto plan = f->plan(config(128, 8, 2), p, four, device);
    REQUIRE(plan.size() == 1);
    CHECK(plan[0].kernel == 0);
    CHECK(plan[0].grid[0] == 10);  // ceil(111 / 12)
    CHECK(plan[0].block[0] == 128);
    REQUIRE(plan[0].args.count() == 8);  // x, cos, sin, y, tokens, heads, seq, row_stride
    CHECK(*static_cast<const long long*>(plan[0].args.pointers()[7]) == 5 * 80);  // contiguous rows by default

    const Problem big = problem("bf16", 64, 32, 1024, 1 << 20);
    CHECK(f->plan(config(256, 8, 4, 2), big, four, device)[0].grid[0] == static_cast<unsigned>(2 * device.sm_count));
    CHECK(f->plan(config(256, 8, 4), big, four, device)[0].grid[0] == (1u << 20) * 8 / 32);

    CHECK_THROWS_WITH(f->plan(config(128, 8, 2), p, {0x1000, 0x2000}, device),
                      Catch::Contains("2 buffer addresses given, the workload has 4"));
    CHECK_THROWS_AS(f->plan(config(128, 8, 2), problem("bf16", 81), four, device), Error);
  }
}

TEST_CASE("rope byte and FLOP counts", "[rope][family]") {
  const Problem p32 = problem("f32", 64, 12, 256, 1024), p16 = problem("bf16", 64, 12, 256, 1024);
  const double n = 1024.0 * 12 * 64;
  CHECK(rope::forward_family().bytes(p32) == 2 * 4 * n + 4.0 * 256 * 64);
  CHECK(rope::forward_family().bytes(p16) == 2 * 2 * n + 4.0 * 256 * 64);
  CHECK(rope::backward_family().bytes(problem("f32", 64, 12, 256, 100)) == 2 * 4 * 100.0 * 12 * 64 + 4.0 * 100 * 64);
  CHECK(rope::forward_family().flops(p32) == 3 * n);
  CHECK(rope::backward_family().flops(p16) == 3 * n);
}

}  // namespace templates_rope_family_test
