// grad_norm, host side: problems, constraints, the workspace, launch plans.
#include "templates/grad_norm/grad_norm.hpp"

#include <catch2/catch.hpp>

#include "base/error.hpp"

namespace templates_grad_norm_family_test {

using namespace ktune;
using namespace ktune::templates;

TEST_CASE("grad_norm is registered and rejects bad problems with what is accepted", "[grad_norm][family]") {
  const Family& f = find_family("grad_norm");
  CHECK_THROWS_WITH(f.check_problem(Problem{"bf16", {{"tensors", 1}, {"numel", 4}}}), Catch::Contains("accepted: f32"));
  CHECK_THROWS_WITH(f.check_problem(Problem{"f32", {{"tensors", 0}, {"numel", 4}}}), Catch::Contains("1..4096"));
  CHECK_THROWS_WITH(f.check_problem(Problem{"f32", {{"tensors", 1}, {"rows", 4}}}),
                    Catch::Contains("unknown dimension 'rows'"));
  CHECK_THAT(f.summary(), Catch::Contains("deterministic"));
}

TEST_CASE("grad_norm plans partials per launch of tensors, one final sum, then the clip", "[grad_norm][family]") {
  const auto& f = grad_norm::family();
  const auto device = DeviceLimits::for_arch("sm_90");
  const Problem p{"f32", {{"tensors", 130}, {"numel", 10000}}};
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

}  // namespace templates_grad_norm_family_test
