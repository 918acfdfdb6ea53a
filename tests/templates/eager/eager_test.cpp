// Eager decompositions, host side: the chains as data, their temporaries,
// their launch plans over bound buffers, and clear errors.
#include "templates/eager/eager.hpp"

#include <catch2/catch.hpp>
#include <cstring>

#include "base/error.hpp"

namespace templates_eager_eager_test {

using namespace ktune;
using namespace ktune::templates;

TEST_CASE("every decomposition is a chain of valid primitive launches", "[eager]") {
  const auto device = DeviceLimits::for_arch("sm_90");
  REQUIRE(eager::decomposed_families().size() == 14);
  for (const auto& name : eager::decomposed_families()) {
    for (const auto& p : find_family(name).problem_classes()) {
      INFO(name << " " << p.key());
      const auto d = eager::decompose(name, p);
      REQUIRE_FALSE(d.steps.empty());
      const auto buffers = find_family(name).make_workload(p, 1).buffers.size();
      const eager::Bindings bound = eager::bind_workload(name, p, std::vector<std::uint64_t>(buffers, 0x100000));
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
  CHECK(names(eager::decompose("rmsnorm_fwd", f32)) == std::vector<std::string>{"prim_square", "prim_row_mean",
                                                                                "prim_add_scalar", "prim_rsqrt",
                                                                                "prim_mul", "prim_mul"});
  CHECK(names(eager::decompose("rmsnorm_fwd", bf16)).front() == "cast_to_f32");
  CHECK(names(eager::decompose("rmsnorm_fwd", bf16)).back() == "cast_to_bf16");
  CHECK(names(eager::decompose("swiglu_fwd", Problem{"bf16", {{"n", 100}}})) ==
        std::vector<std::string>{"prim_silu", "prim_mul"});
  CHECK(names(eager::decompose("cross_entropy_fwd", Problem{"f32", {{"rows", 4}, {"vocab", 100}}})) ==
        std::vector<std::string>{"prim_row_max", "prim_sub", "prim_exp", "prim_row_sum", "prim_log", "prim_add",
                                 "prim_gather", "prim_sub"});
  const Problem scores{"bf16", {{"rows", 64}, {"cols", 16}, {"causal", 1}}};
  CHECK(names(eager::decompose("softmax_fwd", scores)) ==
        std::vector<std::string>{"prim_scale", "prim_causal_mask", "softmax_fwd"});
  CHECK(names(eager::decompose("softmax_bwd", scores)) ==
        std::vector<std::string>{"softmax_bwd", "prim_causal_mask", "prim_scale"});
  CHECK(names(eager::decompose("softmax_fwd", Problem{"f32", {{"rows", 64}, {"cols", 16}, {"causal", 0}}})) ==
        std::vector<std::string>{"prim_scale", "softmax_fwd"});
  CHECK(eager::temporaries_bytes("softmax_fwd", scores) == 0);  // it runs in y
  // RoPE: x1*cos, x2*sin, sub, x1*sin, x2*cos, add, stack; a partial last sequence is a second pass.
  const std::vector<std::string> rope_f32 = {"prim_strided_mul", "prim_strided_mul", "prim_strided_sub",
                                             "prim_strided_mul", "prim_strided_mul", "prim_strided_add",
                                             "prim_strided_copy"};
  CHECK(names(eager::decompose(
            "rope_fwd", Problem{"f32", {{"tokens", 40}, {"heads", 2}, {"head_dim", 8}, {"seq", 10}}})) == rope_f32);
  CHECK(
      names(eager::decompose("rope_bwd", Problem{"f32", {{"tokens", 45}, {"heads", 2}, {"head_dim", 8}, {"seq", 10}}}))
          .size() == 14);
  CHECK(names(eager::decompose("embedding_fwd", Problem{"bf16", {{"rows", 4}, {"dim", 8}, {"vocab", 10}}})) ==
        std::vector<std::string>{"prim_gather_rows"});
  CHECK(names(eager::decompose("embedding_bwd", Problem{"f32", {{"rows", 4}, {"dim", 8}, {"vocab", 10}}})) ==
        std::vector<std::string>{"prim_fill", "prim_index_add"});
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
  // Softmax's scale is a run-time scalar of its Args.
  const Problem scores{"f32", {{"rows", 8}, {"cols", 8}, {"causal", 1}}};
  eager::Bindings no_scale = eager::bind(softmax::ForwardArgs{.x = 0x1000, .y = 0x2000});
  no_scale.scalars.clear();
  CHECK_THROWS_WITH(eager::plan("softmax_fwd", scores, no_scale, 0, device), Catch::Contains("scalar 'scale'"));
  const auto plan = eager::plan(
      "softmax_fwd", scores, eager::bind(softmax::ForwardArgs{.x = 0x1000, .y = 0x2000, .scale = 0.125f}), 0, device);
  REQUIRE(plan.steps.front().family->name() == "prim_scale");
  float alpha = 0;  // the scale mul's scalar, the launch's last argument
  const auto& args = plan.steps.front().launches.front().args;
  std::memcpy(&alpha, args.bytes().data() + args.offsets().back(), sizeof alpha);
  CHECK(alpha == 0.125f);
}

}  // namespace templates_eager_eager_test
