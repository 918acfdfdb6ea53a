// RMSNorm families, host side: problems, constraints, defaults, rendering,
// workloads and launch plans.
#include "templates/rmsnorm/rmsnorm.hpp"

#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.hpp"
#include "templates/common/family_helpers.hpp"
#include "templates/render.hpp"

namespace templates_rmsnorm_family_test {

using namespace ktune;
using namespace ktune::templates;
using namespace ktune::templates::rmsnorm;

namespace {

Config row_config(std::int64_t threads, std::int64_t row_threads, std::int64_t vec) {
  return Config({{"threads", threads}, {"row_threads", row_threads}, {"vec", vec}});
}
Config bwd_config(std::int64_t threads, std::int64_t row_threads, std::int64_t vec, std::int64_t blocks) {
  Config c = row_config(threads, row_threads, vec);
  c.set("blocks", blocks);
  c.set("prefetch", 0);
  return c;
}

std::string why_invalid(const Family& f, const Config& c, const Problem& p) {
  std::string why;
  CHECK_FALSE(f.is_valid(c, p, DeviceLimits::for_arch("sm_90"), &why));
  return why;
}

}  // namespace

TEST_CASE("rmsnorm families are registered and reject bad problems with what is accepted", "[rmsnorm][family]") {
  for (const auto& [name, max_dim] : {std::pair{"rmsnorm_fwd", kMaxDim}, std::pair{"rmsnorm_bwd", kMaxBackwardDim}}) {
    const Family& f = find_family(name);
    INFO(name);
    const std::string range = "'dim' must be in 1.." + std::to_string(max_dim);
    CHECK_THROWS_WITH(f.check_problem(Problem{"f16", {{"rows", 4}, {"dim", 64}}}),
                      Catch::Contains("accepted: f32, bf16"));
    CHECK_THROWS_WITH(f.check_problem(Problem{"f32", {{"rows", 4}, {"dim", 0}}}), Catch::Contains(range));
    CHECK_THROWS_WITH(f.check_problem(Problem{"f32", {{"rows", 4}, {"dim", max_dim + 1}}}), Catch::Contains(range));
    CHECK_NOTHROW(f.check_problem(Problem{"f32", {{"rows", 4}, {"dim", max_dim}}}));
    CHECK_THROWS_WITH(f.check_problem(Problem{"f32", {{"rows", 0}, {"dim", 64}}}),
                      Catch::Contains("'rows' (tokens) must be"));
    CHECK_THROWS_WITH(f.check_problem(Problem{"f32", {{"dim", 64}}}), Catch::Contains("'rows' (tokens) must be"));
    CHECK_THROWS_WITH(f.check_problem(Problem{"f32", {{"rows", 4}, {"dim", 64}, {"cols", 2}}}),
                      Catch::Contains("unknown dimension 'cols'; accepted: rows, dim"));
    CHECK_THROWS_AS(f.make_workload(Problem{"f32", {{"rows", 4}, {"dim", 0}}}, 1), Error);
    CHECK_NOTHROW(f.check_problem(Problem{"bf16", {{"rows", 4096}, {"dim", 2560}}}));
  }
}

TEST_CASE("rmsnorm constraints reject configs before compiling, saying why", "[rmsnorm][family]") {
  const Family& fwd = forward_family();
  const Family& bwd = backward_family();
  const Problem f32{"f32", {{"rows", 64}, {"dim", 1024}}};
  const Problem bf16{"bf16", {{"rows", 64}, {"dim", 1024}}};
  CHECK(fwd.is_valid(row_config(256, 32, 4), f32, DeviceLimits::for_arch("sm_90")));
  CHECK_THAT(why_invalid(fwd, row_config(256, 32, 8), f32), Catch::Contains("at most 16 bytes"));
  CHECK(fwd.is_valid(row_config(256, 32, 8), bf16, DeviceLimits::for_arch("sm_90")));
  CHECK_THAT(why_invalid(fwd, row_config(64, 128, 4), f32), Catch::Contains("fit in one block"));
  CHECK_THAT(why_invalid(fwd, row_config(256, 32, 4), Problem{"f32", {{"rows", 64}, {"dim", 1030}}}),
             Catch::Contains("not a multiple of vec 4"));
  CHECK_THAT(why_invalid(fwd, row_config(256, 8, 4), f32), Catch::Contains("128 elements of its row in registers"));
  CHECK_THAT(why_invalid(fwd, row_config(1024, 1024, 4), f32), Catch::Contains("would get no vector of the"));
  // The same layouts for the backward, whose `blocks` must not exceed the row groups.
  CHECK_THAT(why_invalid(bwd, bwd_config(256, 32, 8, 64), f32), Catch::Contains("at most 16 bytes"));
  CHECK(bwd.is_valid(bwd_config(256, 32, 4, 64), Problem{"f32", {{"rows", 19}, {"dim", 1024}}},
                     DeviceLimits::for_arch("sm_90")));  // the smallest `blocks` is always allowed
  CHECK_THAT(why_invalid(bwd, bwd_config(256, 32, 4, 128), Problem{"f32", {{"rows", 19}, {"dim", 1024}}}),
             Catch::Contains("row groups"));
  // The backward's share of x, dy and dw must fit the registers a block of `threads` leaves each thread.
  const Problem wide{"f32", {{"rows", 4096}, {"dim", 2560}}};
  CHECK_THAT(why_invalid(bwd, bwd_config(1024, 128, 4, 256), wide), Catch::Contains("it would spill"));
  CHECK(bwd.is_valid(bwd_config(256, 128, 4, 256), wide, DeviceLimits::for_arch("sm_90")));
  CHECK(fwd.is_valid(row_config(1024, 128, 4), wide, DeviceLimits::for_arch("sm_90")));  // x alone fits
  // A device limit: an sm_90 block of 1024 threads, on a device that allows fewer.
  DeviceLimits small = DeviceLimits::for_arch("sm_90");
  small.max_threads_per_block = 512;
  std::string why;
  CHECK_FALSE(fwd.is_valid(row_config(1024, 128, 4), f32, small, &why));
  CHECK_THAT(why, Catch::Contains("block limit"));
}

TEST_CASE("rmsnorm defaults are valid for every accepted dim and keep each thread's share small", "[rmsnorm][family]") {
  for (const auto& [f, max_dim] :
       {std::pair<const Family*, std::int64_t>{&forward_family(), kMaxDim},
        std::pair<const Family*, std::int64_t>{&backward_family(), kMaxBackwardDim}})
    for (const char* dtype : {"f32", "bf16"})
      for (std::int64_t dim : std::vector<std::int64_t>{1, 3, 7, 64, 100, 512, 768, 1000, 1600, 2560, 4097,
                                                        max_dim / 2 + 1, max_dim - 1, max_dim})
        for (std::int64_t rows : {1, 19, 4096}) {
          const Problem p{dtype, {{"rows", rows}, {"dim", dim}}};
          INFO(f->name() << " " << p.key());
          const Config c = f->default_config(p);
          CHECK_NOTHROW(f->space().check_member(c));
          std::string why;
          CHECK(f->is_valid(c, p, DeviceLimits::for_arch("sm_80"), &why));
          CHECK(why.empty());
          const std::int64_t held = c.at("vec") * ((dim + c.at("row_threads") * c.at("vec") - 1) /
                                                   (c.at("row_threads") * c.at("vec")));
          CHECK(held <= kMaxElementsPerThread);
          if (dim % 8 == 0) CHECK(c.at("vec") == (std::string(dtype) == "bf16" ? 8 : 4));  // the widest access
        }
}

TEST_CASE("rmsnorm backward candidates: the default with its next row group prefetched, then with more blocks, "
          "then with more rows a block, and the residual's dstream loaded early",
          "[rmsnorm][family]") {
  for (const char* name : {"rmsnorm_bwd", "residual_rmsnorm_bwd"}) {
    const Family& f = find_family(name);
    const Problem xl{"bf16", {{"rows", 4096}, {"dim", 1600}}};
    INFO(name);
    const auto candidates = f.candidates(xl);
    const bool residual = std::string(name) == "residual_rmsnorm_bwd";
    REQUIRE(candidates.size() == (residual ? 7 : 6));
    const Config def = f.default_config(xl);
    CHECK(def.at("prefetch") == 0);
    CHECK(def.at("blocks") == 256);
    const std::vector<std::pair<std::int64_t, std::int64_t>> prefetch_blocks = {{1, 256}, {1, 512}, {0, 512},
                                                                                {1, 1024}};
    for (std::size_t i = 0; i < 4; ++i) {
      Config expected = def;
      expected.set("prefetch", prefetch_blocks[i].first);
      expected.set("blocks", prefetch_blocks[i].second);
      CHECK(candidates[i] == expected);
      CHECK(f.is_valid(candidates[i], xl, DeviceLimits::for_arch("sm_90")));
    }
    // Four and two times the default's rows a block (256 threads, 2 rows), the blocks unchanged.
    CHECK(candidates[4] == with(def, {{"threads", 1024}}));
    CHECK(candidates[5] == with(def, {{"threads", 512}}));
    for (std::size_t i = 4; i < 6; ++i) CHECK(f.is_valid(candidates[i], xl, DeviceLimits::for_arch("sm_90")));
    // The residual's: dstream loaded with this group's x and dy (prefetch 2, a value rmsnorm_bwd has not).
    if (residual) {
      CHECK(candidates[6] == with(def, {{"prefetch", 2}}));
      CHECK(f.is_valid(candidates[6], xl, DeviceLimits::for_arch("sm_90")));
    } else {
      CHECK_FALSE(f.space().index_of(with(def, {{"prefetch", 2}})).has_value());
    }
  }
  CHECK(forward_family().candidates(Problem{"bf16", {{"rows", 4096}, {"dim", 1600}}}).empty());
}

TEST_CASE("rmsnorm rendering: the row's share per thread is a template argument, shapes with the same share "
          "share a binary",
          "[rmsnorm][family]") {
  const Family& fwd = forward_family();
  const Problem p{"f32", {{"rows", 8}, {"dim", 1024}}};
  const Config c = row_config(256, 64, 4);
  const Rendered r = fwd.render(c, p);
  REQUIRE(r.kernels.size() == 1);
  CHECK(r.kernels[0] == "rmsnorm::rmsnorm_fwd<256, 64, 4, 4, float>");
  CHECK(fwd.render(c, Problem{"f32", {{"rows", 999}, {"dim", 1000}}}).source == r.source);  // also 4 vectors each
  CHECK(fwd.render(c, Problem{"f32", {{"rows", 8}, {"dim", 1028}}}).kernels[0] ==
        "rmsnorm::rmsnorm_fwd<256, 64, 4, 5, float>");
  CHECK(fwd.render(row_config(256, 64, 8), Problem{"bf16", {{"rows", 8}, {"dim", 1024}}}).kernels[0] ==
        "rmsnorm::rmsnorm_fwd<256, 64, 8, 2, kt::bf16>");
  const Rendered b = backward_family().render(bwd_config(128, 32, 4, 64), p);
  REQUIRE(b.kernels.size() == 2);
  CHECK(b.kernels[0] == "rmsnorm::rmsnorm_bwd<128, 32, 4, 8, 0, float>");
  CHECK(b.kernels[1] == "rmsnorm::rmsnorm_dw_reduce<1024>");
  CHECK(b.source == backward_family().render(bwd_config(128, 32, 4, 512), p).source);  // `blocks` is the grid only
}

TEST_CASE("rmsnorm workloads: fresh inputs per seed, reference outputs with the dtype's tolerance",
          "[rmsnorm][family]") {
  const Problem p{"bf16", {{"rows", 5}, {"dim", 48}}};
  const Workload fw = forward_family().make_workload(p, 3);
  REQUIRE(fw.buffers.size() == 4);
  CHECK(fw.buffers[0].name == "x");
  CHECK(fw.buffers[0].dtype == DType::kBF16);
  CHECK(fw.buffers[0].elements() == 5 * 48);
  CHECK(fw.buffers[1].dtype == DType::kF32);  // w: fp32 master weights
  CHECK(fw.buffers[2].role == Role::kOutput);
  CHECK(fw.buffers[2].tolerance == tolerance_for("bf16"));
  CHECK(fw.buffers[3].name == "rstd");
  CHECK(fw.buffers[3].tolerance == tolerance_for("f32"));
  CHECK(forward_family().make_workload(p, 4).buffers[0].bytes != fw.buffers[0].bytes);

  // Per row, the expected y divided by w has the mean square ms / (ms + eps),
  // ms = mean(x^2); the rows' scales make eps matter in some of them.
  std::vector<float> w(48);
  std::memcpy(w.data(), fw.buffers[1].bytes.data(), 48 * 4);
  auto bf16_at = [](const std::vector<std::byte>& v, int i) { return value_at(DType::kBF16, v, i); };
  double smallest_ratio = 1;
  for (int r = 0; r < 5; ++r) {
    double ms_x = 0, ms_y = 0;
    for (int c = 0; c < 48; ++c) {
      const double x = bf16_at(fw.buffers[0].bytes, r * 48 + c);
      const double y = bf16_at(fw.buffers[2].expected, r * 48 + c) / w[static_cast<std::size_t>(c)];
      ms_x += x * x / 48;
      ms_y += y * y / 48;
    }
    const double ratio = ms_x / (ms_x + static_cast<double>(kEps));
    CHECK(ms_y == Approx(ratio).epsilon(1e-2));
    smallest_ratio = std::min(smallest_ratio, ratio);
  }
  CHECK(smallest_ratio < 0.9);  // eps is visible in at least one row

  const Workload bw = backward_family().make_workload(p, 3);
  REQUIRE(bw.buffers.size() == 7);
  const char* names[] = {"x", "w", "rstd", "dy", "dx", "dw", "scratch"};
  for (std::size_t i = 0; i < 7; ++i) CHECK(bw.buffers[i].name == names[i]);
  CHECK(bw.buffers[2].role == Role::kInput);
  CHECK(bw.buffers[4].role == Role::kOutput);
  CHECK(bw.buffers[5].dtype == DType::kF32);
  CHECK(bw.buffers[5].expected.size() == 48 * 4);
  CHECK(bw.buffers[6].role == Role::kScratch);
  CHECK(static_cast<std::int64_t>(bw.buffers[6].elements()) == scratch_floats(p));
  CHECK(scratch_floats(p) == kMaxBlocks * 48);
}

TEST_CASE("rmsnorm plans: one row group per block forward, dx then the dw reduction backward", "[rmsnorm][family]") {
  const auto device = DeviceLimits::for_arch("sm_90");
  const Problem p{"f32", {{"rows", 301}, {"dim", 1000}}};
  const std::vector<std::uint64_t> fa = {0x1000, 0x2000, 0x3000, 0x4000};
  const auto fplan = forward_family().plan(row_config(128, 32, 4), p, fa, device);
  REQUIRE(fplan.size() == 1);
  CHECK(fplan[0].grid[0] == 76);  // ceil(301 / 4 rows per block)
  CHECK(fplan[0].block[0] == 128);
  CHECK(fplan[0].args.count() == 7);

  const std::vector<std::uint64_t> ba = {0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0x6000, 0x7000};
  auto bplan = backward_family().plan(bwd_config(128, 32, 4, 64), p, ba, device);
  REQUIRE(bplan.size() == 2);
  CHECK(bplan[0].kernel == 0);
  CHECK(bplan[0].grid[0] == 64);
  CHECK(bplan[1].kernel == 1);
  CHECK(bplan[1].grid[0] == 32);  // ceil(1000 / 32 columns)
  CHECK(bplan[1].args.count() == 4);
  // Fewer row groups than `blocks`: one block per group.
  bplan = backward_family().plan(bwd_config(128, 32, 4, 1024), Problem{"f32", {{"rows", 30}, {"dim", 1000}}}, ba,
                                 device);
  CHECK(bplan[0].grid[0] == 8);

  auto misaligned = fa;
  misaligned[0] += 4;
  CHECK_THROWS_WITH(forward_family().plan(row_config(128, 32, 4), p, misaligned, device),
                    Catch::Contains("buffer 'x'") && Catch::Contains("not aligned to the 16 bytes"));
  CHECK_NOTHROW(forward_family().plan(row_config(128, 32, 1), p, misaligned, device));  // scalar accesses
  CHECK_THROWS_WITH(forward_family().plan(row_config(128, 32, 4), p, std::vector<std::uint64_t>{0x1000}, device),
                    Catch::Contains("x, w, y, rstd"));
}

TEST_CASE("rmsnorm counts: FLOPs and minimum traffic scale with the problem", "[rmsnorm][family]") {
  const Problem f32{"f32", {{"rows", 100}, {"dim", 1000}}};
  const Problem bf16{"bf16", {{"rows", 100}, {"dim", 1000}}};
  CHECK(forward_family().bytes(f32) == 2.0 * 4 * 100 * 1000 + 4 * 1000 + 4 * 100);
  CHECK(forward_family().bytes(bf16) == 2.0 * 2 * 100 * 1000 + 4 * 1000 + 4 * 100);
  CHECK(backward_family().bytes(f32) == 3.0 * 4 * 100 * 1000 + 8 * 1000 + 4 * 100);
  CHECK(forward_family().flops(f32) > 0);
  CHECK(backward_family().flops(f32) > forward_family().flops(f32));
}

}  // namespace templates_rmsnorm_family_test
