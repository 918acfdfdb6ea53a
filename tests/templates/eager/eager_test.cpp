// Eager decompositions, host side: the chains as data, their temporaries,
// their launch plans over bound buffers, and clear errors.
#include "templates/eager/eager.hpp"

#include <catch2/catch.hpp>

#include "base/error.hpp"

using namespace ktune;
using namespace ktune::templates;

TEST_CASE("every decomposition is a chain of valid primitive launches", "[eager]") {
  const auto device = DeviceLimits::for_arch("sm_90");
  REQUIRE(eager::decomposed_families().size() == 8);
  for (const auto& name : eager::decomposed_families()) {
    for (const auto& p : find_family(name).problem_classes()) {
      INFO(name << " " << p.key());
      const auto d = eager::decompose(name, p);
      REQUIRE_FALSE(d.steps.empty());
      eager::Bindings bound;
      for (const auto& b : find_family(name).make_workload(p, 1).buffers) bound[b.name] = 0x100000;
      const auto plan = eager::plan(name, p, bound, 0x200000, device);
      CHECK(plan.steps.size() == d.steps.size());
      CHECK(plan.temporaries_bytes == eager::temporaries_bytes(name, p));
      CHECK(plan.temporaries_bytes % 256 == 0);
      for (const auto& s : plan.steps) {
        CHECK(s.family->is_valid(s.config, s.problem, device));
        CHECK_FALSE(s.launches.empty());
      }
    }
  }
}

TEST_CASE("eager chains are the launches PyTorch eager issues", "[eager]") {
  const Problem f32{"f32", {{"rows", 64}, {"dim", 768}}};
  const Problem bf16{"bf16", {{"rows", 64}, {"dim", 768}}};
  auto names = [](const eager::Decomposition& d) {
    std::vector<std::string> out;
    for (const auto& s : d.steps) out.push_back(s.family->name());
    return out;
  };
  CHECK(names(eager::decompose("rmsnorm_fwd", f32)) ==
        std::vector<std::string>{"prim_square", "prim_row_mean", "prim_add_scalar", "prim_rsqrt", "prim_mul", "prim_mul"});
  CHECK(names(eager::decompose("rmsnorm_fwd", bf16)).front() == "cast_to_f32");
  CHECK(names(eager::decompose("rmsnorm_fwd", bf16)).back() == "cast_to_bf16");
  CHECK(names(eager::decompose("swiglu_fwd", Problem{"bf16", {{"n", 100}}})) ==
        std::vector<std::string>{"prim_silu", "prim_mul"});
  CHECK(names(eager::decompose("cross_entropy_fwd", Problem{"f32", {{"rows", 4}, {"vocab", 100}}})) ==
        std::vector<std::string>{"prim_row_max", "prim_sub", "prim_exp", "prim_row_sum", "prim_log", "prim_add",
                                 "prim_gather", "prim_sub"});
  // Temporaries: x^2 and x normalised (rows * dim floats each), three per-row vectors.
  CHECK(eager::temporaries_bytes("rmsnorm_fwd", f32) == 2 * 64 * 768 * 4 + 2 * 256);
}

TEST_CASE("eager plans say what is missing", "[eager]") {
  const auto device = DeviceLimits::for_arch("sm_90");
  const Problem p{"f32", {{"rows", 4}, {"dim", 64}}};
  CHECK_THROWS_WITH(eager::decompose("attention_fwd", p), Catch::Contains("families with one: cross_entropy_bwd"));
  CHECK_THROWS_WITH(eager::decompose("rmsnorm_fwd", Problem{"f32", {{"rows", 4}}}), Catch::Contains("'dim'"));
  const eager::Bindings partial = eager::bind(rmsnorm::ForwardArgs{.x = 0x1000, .w = 0x2000, .y = 0x3000});
  CHECK_THROWS_WITH(eager::plan("rmsnorm_fwd", p, partial, 0x10000, device), Catch::Contains("'rstd' is not bound"));
  const eager::Bindings full = eager::bind(rmsnorm::ForwardArgs{.x = 0x1000, .w = 0x2000, .y = 0x3000, .rstd = 0x4000});
  CHECK_THROWS_WITH(eager::plan("rmsnorm_fwd", p, full, 0, device), Catch::Contains("no temporaries"));
  CHECK_NOTHROW(eager::plan("rmsnorm_fwd", p, full, 0x10000, device));
}
