// The families' typed run-time face: a plan from named Args is exactly the
// plan of the workload adapter for the same addresses; workspace_bytes covers
// what the launches touch; a wrong address count is a clear kInvalidInput.
#include <fmt/format.h>

#include <catch2/catch.hpp>

#include "base/error.hpp"
#include "templates/adamw/adamw.hpp"
#include "templates/cast/cast.hpp"
#include "templates/cross_entropy/cross_entropy.hpp"
#include "templates/eager/primitive.hpp"
#include "templates/embedding/embedding.hpp"
#include "templates/grad_norm/grad_norm.hpp"
#include "templates/rmsnorm/rmsnorm.hpp"
#include "templates/rope/rope.hpp"
#include "templates/sampled_configs.hpp"
#include "templates/softmax/softmax.hpp"
#include "templates/swiglu/swiglu.hpp"

namespace templates_typed_family_test {

using namespace ktune;
using namespace ktune::templates;

namespace {

const DeviceLimits kDevice = DeviceLimits::for_arch("sm_90");

/// Distinct, 256-byte aligned addresses, one per buffer of `p`'s workload.
std::vector<std::uint64_t> addresses_for(const Family& f, const Problem& p) {
  std::vector<std::uint64_t> a;
  for (std::size_t i = 0; i < f.make_workload(p, 1).buffers.size(); ++i) a.push_back(0x100000 * (i + 1));
  return a;
}

void check_same_launches(const std::vector<Launch>& typed, const std::vector<Launch>& adapter) {
  REQUIRE(typed.size() == adapter.size());
  REQUIRE_FALSE(typed.empty());
  for (std::size_t i = 0; i < typed.size(); ++i) {
    INFO("launch " << i);
    CHECK(typed[i].kernel == adapter[i].kernel);
    CHECK(typed[i].grid == adapter[i].grid);
    CHECK(typed[i].block == adapter[i].block);
    CHECK(typed[i].dynamic_smem == adapter[i].dynamic_smem);
    CHECK(typed[i].args.offsets() == adapter[i].args.offsets());
    CHECK(typed[i].args.bytes() == adapter[i].args.bytes());
  }
}

/// For every problem class of `f` and a sample of configs: the plan from
/// `named(addresses)` (Args written field by field) equals the workload
/// adapter's plan for the addresses; args_of with one address too few or too
/// many throws kInvalidInput naming the buffers.
template <class Args, class Named>
void check_typed_plan(const TypedFamily<Args>& f, Named named) {
  const Family& adapter = f;
  for (const auto& p : f.problem_classes()) {
    const auto addresses = addresses_for(f, p);
    const Args args = named(p, addresses);
    for (const auto& c : test::sampled_configs(f, p, kDevice, 6)) {
      INFO(f.name() << " " << p.key() << " " << c.str());
      check_same_launches(f.plan(c, p, args, kDevice), adapter.plan(c, p, addresses, kDevice));
    }
    auto fewer = addresses, more = addresses;
    fewer.pop_back();
    more.push_back(0x42000000);
    for (const auto& wrong : {fewer, more}) {
      INFO(f.name() << " with " << wrong.size() << " addresses");
      try {
        f.args_of(p, wrong);
        FAIL("args_of accepted a wrong address count");
      } catch (const Error& e) {
        CHECK(e.kind() == ErrorKind::kInvalidInput);
        CHECK_THAT(e.what(), Catch::Contains(f.name()) &&
                                 Catch::Contains(fmt::format("{} buffer addresses given", wrong.size())) &&
                                 Catch::Contains(fmt::format("the workload has {}", addresses.size())));
      }
      CHECK_THROWS_AS(adapter.plan(f.default_config(p), p, wrong, kDevice), Error);
    }
  }
}

}  // namespace

TEST_CASE("rmsnorm: the typed plan with named args is the workload adapter's plan", "[rmsnorm][typed]") {
  check_typed_plan(rmsnorm::forward_family(), [](const Problem&, const std::vector<std::uint64_t>& a) {
    return rmsnorm::ForwardArgs{.x = a[0], .w = a[1], .y = a[2], .rstd = a[3]};
  });
  check_typed_plan(rmsnorm::backward_family(), [](const Problem&, const std::vector<std::uint64_t>& a) {
    return rmsnorm::BackwardArgs{
        .x = a[0], .w = a[1], .rstd = a[2], .dy = a[3], .dx = a[4], .dw = a[5], .workspace = a[6]};
  });
}

TEST_CASE("residual_rmsnorm: the typed plan with named args is the workload adapter's plan", "[rmsnorm][typed]") {
  check_typed_plan(rmsnorm::residual_forward_family(), [](const Problem&, const std::vector<std::uint64_t>& a) {
    return rmsnorm::ResidualForwardArgs{.x = a[0], .r = a[1], .w = a[2], .h = a[3], .y = a[4], .rstd = a[5]};
  });
  check_typed_plan(rmsnorm::residual_backward_family(), [](const Problem&, const std::vector<std::uint64_t>& a) {
    return rmsnorm::ResidualBackwardArgs{.h = a[0], .w = a[1], .rstd = a[2], .dy = a[3], .dstream = a[4], .dh = a[5],
                                         .dw = a[6], .workspace = a[7]};
  });
}

TEST_CASE("grad_norm: the typed plan with named args is the workload adapter's plan", "[grad_norm][typed]") {
  check_typed_plan(grad_norm::family(), [](const Problem& p, const std::vector<std::uint64_t>& a) {
    grad_norm::Args args;
    for (std::int64_t t = 0; t < p.dim("tensors"); ++t)
      args.tensors.push_back({a[static_cast<std::size_t>(t)], p.dim("numel")});
    args.out = a[a.size() - 2];
    args.workspace = a.back();
    args.max_norm = 1.0f;
    args.clip = p.dim("in_place") != 0;
    return args;
  });
}

TEST_CASE("eager primitives: the typed plan with named args is the workload adapter's plan", "[eager][typed]") {
  for (const auto* f : eager::primitive_families()) {
    const auto& typed = dynamic_cast<const eager::PrimitiveFamily&>(*f);
    check_typed_plan(typed, [&](const Problem& p, const std::vector<std::uint64_t>& a) {
      const std::string n = typed.name();
      if (n == "prim_gather") return eager::PrimArgs{.x = a[0], .idx = a[1], .y = a[2]};
      if (n == "prim_scatter_add") return eager::PrimArgs{.idx = a[1], .y = a[0], .alpha = -1.0f};
      if (n == "prim_causal_mask") return eager::PrimArgs{.y = a[0], .alpha = 0.75f};
      if (n == "prim_strided_copy") return eager::PrimArgs{.x = a[0], .y = a[1]};
      if (n == "prim_fill") return eager::PrimArgs{.y = a[0], .alpha = 0.75f};
      if (n == "prim_gather_rows" || n == "prim_index_add") return eager::PrimArgs{.x = a[0], .idx = a[1], .y = a[2]};
      if (n.rfind("prim_strided_", 0) == 0) return eager::PrimArgs{.x = a[0], .b = a[1], .y = a[2]};
      if (p.dims.count("b_rows")) return eager::PrimArgs{.x = a[0], .b = a[1], .y = a[2]};
      if (p.dims.count("n")) return eager::PrimArgs{.x = a[0], .y = a[1], .alpha = 0.75f};  // the workloads' scalar
      return eager::PrimArgs{.x = a[0], .y = a[1]};
    });
  }
}

TEST_CASE("cross_entropy: the typed plan with named args is the workload adapter's plan", "[cross_entropy][typed]") {
  check_typed_plan(cross_entropy::forward_family(), [](const Problem&, const std::vector<std::uint64_t>& a) {
    return cross_entropy::ForwardArgs{.logits = a[0], .targets = a[1], .losses = a[2], .lse = a[3]};
  });
  check_typed_plan(cross_entropy::backward_family(), [](const Problem& p, const std::vector<std::uint64_t>& a) {
    return cross_entropy::BackwardArgs{
        .logits = a[0], .targets = a[1], .lse = a[2], .dlogits = a[3], .scale = cross_entropy::mean_scale(p)};
  });
}

TEST_CASE("rope: the typed plan with named args is the workload adapter's plan", "[rope][typed]") {
  check_typed_plan(rope::forward_family(), [](const Problem&, const std::vector<std::uint64_t>& a) {
    return rope::ForwardArgs{.x = a[0], .cos = a[1], .sin = a[2], .y = a[3]};
  });
  check_typed_plan(rope::backward_family(), [](const Problem&, const std::vector<std::uint64_t>& a) {
    return rope::BackwardArgs{.dy = a[0], .cos = a[1], .sin = a[2], .dx = a[3]};
  });
}

TEST_CASE("swiglu: the typed plan with named args is the workload adapter's plan", "[swiglu][typed]") {
  check_typed_plan(swiglu::forward_family(), [](const Problem&, const std::vector<std::uint64_t>& a) {
    return swiglu::ForwardArgs{.a = a[0], .b = a[1], .h = a[2]};
  });
  check_typed_plan(swiglu::backward_family(), [](const Problem&, const std::vector<std::uint64_t>& a) {
    return swiglu::BackwardArgs{.a = a[0], .b = a[1], .dh = a[2], .da = a[3], .db = a[4]};
  });
}

TEST_CASE("cast: the typed plan with named args is the workload adapter's plan", "[cast][typed]") {
  for (const cast::CastFamily* f : {&cast::to_bf16_family(), &cast::to_f32_family()})
    check_typed_plan(*f, [](const Problem&, const std::vector<std::uint64_t>& a) {
      return cast::Args{.x = a[0], .y = a[1]};
    });
}

TEST_CASE("softmax: the typed plan with named args is the workload adapter's plan", "[softmax][typed]") {
  check_typed_plan(softmax::forward_family(), [](const Problem&, const std::vector<std::uint64_t>& a) {
    return softmax::ForwardArgs{.x = a[0], .y = a[1], .scale = softmax::kWorkloadScale};
  });
  check_typed_plan(softmax::backward_family(), [](const Problem&, const std::vector<std::uint64_t>& a) {
    return softmax::BackwardArgs{.y = a[0], .dy = a[1], .dx = a[2], .scale = softmax::kWorkloadScale};
  });
}

TEST_CASE("embedding: the typed plan with named args is the workload adapter's plan", "[embedding][typed]") {
  check_typed_plan(embedding::forward_family(), [](const Problem&, const std::vector<std::uint64_t>& a) {
    return embedding::ForwardArgs{.tokens = a[0], .table = a[1], .out = a[2]};
  });
  check_typed_plan(embedding::backward_family(), [](const Problem&, const std::vector<std::uint64_t>& a) {
    return embedding::BackwardArgs{.tokens = a[0], .d_out = a[1], .d_table = a[2], .workspace = a[3]};
  });
}

TEST_CASE("adamw: the typed plan with named tensors is the workload adapter's plan", "[adamw][typed]") {
  for (const adamw::AdamwFamily* f :
       {&adamw::multi_tensor_family(), &adamw::single_tensor_family(), &adamw::eager_family()}) {
    check_typed_plan(*f, [f](const Problem& p, const std::vector<std::uint64_t>& a) {
      const bool bf16 = p.dtype == "bf16";
      const std::size_t per = bf16 ? 5 : 4;
      adamw::Args args{.tensors = {}, .hyper = adamw::AdamwFamily::workload_hyper(), .workspace = 0, .clip = {}};
      for (std::size_t t = 0; t < static_cast<std::size_t>(p.dim("tensors")); ++t)
        args.tensors.push_back({.param = a[t * per],
                                .grad = a[t * per + 1],
                                .exp_avg = a[t * per + 2],
                                .exp_avg_sq = a[t * per + 3],
                                .param_bf16 = bf16 ? a[t * per + 4] : 0,
                                .numel = p.dim("numel")});
      if (f->workspace_bytes(f->default_config(p), p) > 0) args.workspace = a.back();
      return args;
    });
  }
}

TEST_CASE("workspace_bytes covers what the launches touch", "[typed]") {
  SECTION("rmsnorm_bwd: one fp32 partial dw row per block of the dx launch, within the workload's scratch") {
    const auto& f = rmsnorm::backward_family();
    for (const auto& p : f.problem_classes())
      for (const auto& c : test::sampled_configs(f, p, kDevice, 8)) {
        INFO(p.key() << " " << c.str());
        const auto launches = f.plan(c, p, addresses_for(f, p), kDevice);
        const std::size_t partials = launches[0].grid[0] * static_cast<std::size_t>(p.dim("dim")) * sizeof(float);
        CHECK(f.workspace_bytes(c, p) >= partials);
        CHECK(f.workspace_bytes(c, p) <= static_cast<std::size_t>(rmsnorm::scratch_floats(p)) * sizeof(float));
      }
    const Problem p{"f32", {{"rows", 30}, {"dim", 1000}}};
    const Config c({{"threads", 128}, {"row_threads", 32}, {"vec", 4}, {"blocks", 1024}, {"prefetch", 0}});
    CHECK(f.workspace_bytes(c, p) == 8 * 1000 * sizeof(float));  // 30 rows, 4 per block: 8 blocks, not 1024
    CHECK_THROWS_WITH(f.plan(c, p, rmsnorm::BackwardArgs{.x = 0x1000, .w = 0x2000, .dy = 0x3000, .dx = 0x4000},
                             kDevice),
                      Catch::Contains("no workspace given") && Catch::Contains("32000 bytes"));
  }
  SECTION("adamw_eager: one tensor's fp32 temporary; the fused families need none") {
    const Problem p{"bf16", {{"tensors", 3}, {"numel", 4999}}};
    CHECK(adamw::eager_family().workspace_bytes(adamw::eager_family().default_config(p), p) == 4999 * sizeof(float));
    for (const adamw::AdamwFamily* f : {&adamw::multi_tensor_family(), &adamw::single_tensor_family()})
      CHECK(f->workspace_bytes(f->default_config(p), p) == 0);
  }
  SECTION("embedding_bwd: the sorted variant's starts, cursors and index, within the workload's scratch; the atomic "
          "variant none") {
    const auto& f = embedding::backward_family();
    for (const auto& p : f.problem_classes())
      for (const auto& c : test::sampled_configs(f, p, kDevice, 8)) {
        INFO(p.key() << " " << c.str());
        const std::size_t ints = 2 * p.dim("vocab") + 1 + p.dim("rows");
        CHECK(f.workspace_bytes(c, p) == (c.at("deterministic") == 1 ? ints * sizeof(std::int32_t) : 0));
        CHECK(f.workspace_bytes(c, p) <= static_cast<std::size_t>(embedding::scratch_ints(p)) * sizeof(std::int32_t));
      }
  }
  SECTION("families without scratch need no workspace") {
    for (const Family* f : all_families()) {
      if (f->name() == "rmsnorm_bwd" || f->name() == "residual_rmsnorm_bwd" || f->name() == "adamw_eager" ||
          f->name() == "embedding_bwd" || f->name() == "grad_norm" ||
          f->name() == "attention_bwd")  // D and the dQ accumulator: tests/templates/attention/backward_test.cpp
        continue;
      for (const auto& p : f->problem_classes()) {
        INFO(f->name() << " " << p.key());
        CHECK(f->workspace_bytes(f->default_config(p), p) == 0);
        for (const auto& b : f->make_workload(p, 1).buffers) CHECK(b.role != Role::kScratch);
      }
    }
  }
}

TEST_CASE("the typed plan keeps the alignment checks", "[rmsnorm][cross_entropy][typed]") {
  const Problem p{"bf16", {{"rows", 8}, {"dim", 64}}};
  const Config c({{"threads", 128}, {"row_threads", 32}, {"vec", 8}});
  CHECK_THROWS_WITH(rmsnorm::forward_family().plan(c, p, {.x = 0x1000, .w = 0x2000, .y = 0x3008, .rstd = 0x4000},
                                                   kDevice),
                    Catch::Contains("buffer 'y' at 0x3008 is not aligned to the 16 bytes"));
  const Problem ce{"bf16", {{"rows", 8}, {"vocab", 77}}};
  CHECK_THROWS_WITH(
      cross_entropy::backward_family().plan(cross_entropy::backward_family().default_config(ce), ce,
                                            {.logits = 0x1000, .targets = 0x2002, .lse = 0x3000, .dlogits = 0x1000,
                                             .scale = cross_entropy::mean_scale(ce)},
                                            kDevice),
      Catch::Contains("buffer 'targets'"));
}

}  // namespace templates_typed_family_test
