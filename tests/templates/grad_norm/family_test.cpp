// grad_norm, host side: problems, constraints, the workspace, launch plans.
#include "templates/grad_norm/grad_norm.hpp"

#include <catch2/catch.hpp>

#include "base/error.hpp"

namespace templates_grad_norm_family_test {

using namespace ktune;
using namespace ktune::templates;

TEST_CASE("grad_norm is registered and rejects bad problems with what is accepted", "[grad_norm][family]") {
  const Family& f = find_family("grad_norm");
  CHECK_THROWS_WITH(f.check_problem(Problem{"bf16", {{"tensors", 1}, {"numel", 4}, {"in_place", 1}}}),
                    Catch::Contains("accepted: f32"));
  CHECK_THROWS_WITH(f.check_problem(Problem{"f32", {{"tensors", 0}, {"numel", 4}, {"in_place", 1}}}),
                    Catch::Contains("1..4096"));
  CHECK_THROWS_WITH(f.check_problem(Problem{"f32", {{"tensors", 1}, {"rows", 4}}}),
                    Catch::Contains("unknown dimension 'rows'"));
  // Whether the gradients are scaled is the problem's: it changes the work a tuned config is judged on.
  for (const auto& dims : {std::map<std::string, std::int64_t>{{"tensors", 1}, {"numel", 4}},
                           std::map<std::string, std::int64_t>{{"tensors", 1}, {"numel", 4}, {"in_place", 2}}})
    CHECK_THROWS_WITH(f.check_problem(Problem{"f32", dims}),
                      Catch::Contains("dimension 'in_place' must be 0 or 1 (1: the gradients scaled"));
  CHECK_THAT(f.summary(), Catch::Contains("deterministic"));
}

TEST_CASE("grad_norm plans partials per launch of tensors, one final sum, then the clip", "[grad_norm][family]") {
  const auto& f = grad_norm::family();
  const auto device = DeviceLimits::for_arch("sm_90");
  const Problem p{"f32", {{"tensors", 130}, {"numel", 10000}, {"in_place", 1}}};
  const Config c = f.default_config(p);
  REQUIRE(c.at("chunk") == 16384);
  grad_norm::Args a;
  for (int t = 0; t < 130; ++t) a.tensors.push_back({0x10000u + 0x100000u * static_cast<unsigned>(t), 10000});
  a.out = 0x8000;
  a.workspace = 0x9000;
  a.max_norm = 1.0f;
  CHECK(grad_norm::partial_floats(c, a.tensors) == 130);
  CHECK(f.workspace_bytes(c, p) == 130 * sizeof(float));
  auto launches = f.plan(c, p, a, device);
  REQUIRE(launches.size() == 4);  // 64 + 64 + 2 tensors' partials, then the final sum; no clip asked
  CHECK(launches[0].kernel == 0);
  CHECK(launches[2].kernel == 0);
  CHECK(launches[3].kernel == 1);
  a.clip = true;
  launches = f.plan(c, p, a, device);
  REQUIRE(launches.size() == 7);  // and the clip, per launch of tensors
  CHECK(launches[3].kernel == 1);
  CHECK(launches[3].grid[0] == 1);
  CHECK(launches[4].kernel == 2);
  CHECK(launches[6].kernel == 2);
  a.workspace = 0;
  CHECK_THROWS_WITH(f.plan(c, p, a, device), Catch::Contains("no workspace"));
  const Config widest({{"threads", 1024}, {"vec", 4}, {"chunk", 4096}, {"blocks_per_sm", 2}});
  CHECK(f.is_valid(widest, p, device));  // one block-wide step per chunk
  DeviceLimits small = device;
  small.max_threads_per_block = 512;
  std::string why;
  CHECK_FALSE(f.is_valid(widest, p, small, &why));
  CHECK_THAT(why, Catch::Contains("the device allows 512"));
}

TEST_CASE("grad_norm in place scales the gradients it reads, otherwise it reads them and writes the norm",
          "[grad_norm][family]") {
  const auto& f = grad_norm::family();
  const auto device = DeviceLimits::for_arch("sm_90");
  for (const bool in_place : {true, false}) {
    INFO("in_place " << in_place);
    const Problem p{"f32", {{"tensors", 2}, {"numel", 1000}, {"in_place", in_place ? 1 : 0}}};
    // The workload's buffers, the plan's launches and the bytes a tuned config is judged on all follow it.
    const auto shapes = f.buffer_shapes(p);
    CHECK(shapes[0].role == (in_place ? Role::kInOut : Role::kInput));
    const Config c = f.default_config(p);
    const auto args = f.args_of(p, {0x1000, 0x2000, 0x3000, 0x4000});
    const auto launches = f.plan(c, p, args, device);
    CHECK(std::count_if(launches.begin(), launches.end(), [](const Launch& l) { return l.kernel == 2; }) ==
          (in_place ? 1 : 0));
    CHECK(f.bytes(p) == (in_place ? 12.0 : 4.0) * 2000);
    // A max_norm of 0 leaves the gradients as they are, in place or not.
    auto off = args;
    f.set_scalars(off, p, {{"max_norm", 0.0}});
    CHECK_FALSE(off.clip);
    f.set_scalars(off, p, {{"max_norm", 2.5}});
    CHECK(off.clip == in_place);
  }
}

}  // namespace templates_grad_norm_family_test
