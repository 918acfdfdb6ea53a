// AdamW host side: the CPU reference against a float64 transcription of
// PyTorch's formula, the workloads, and the launch plans.
#include "templates/adamw/adamw.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "templates/render.hpp"

namespace templates_adamw_test {

using namespace ktune;
using namespace ktune::templates;
using namespace ktune::templates::adamw;

TEST_CASE("AdamW reference matches the float64 formula on random data", "[adamw]") {
  std::mt19937_64 rng(7);
  const std::size_t n = 1000;
  auto p = random_floats(rng, n, -1, 1), g = random_floats(rng, n, -1, 1);
  auto m = random_floats(rng, n, -0.1f, 0.1f), v = random_floats(rng, n, 0, 0.01f);
  const auto p0 = p, m0 = m, v0 = v;
  AdamwHyper h;
  h.lr = 1e-2f, h.weight_decay = 0.1f, h.step = 5;
  adamw_step_reference(p.data(), g.data(), m.data(), v.data(), n, h);
  for (std::size_t i = 0; i < n; ++i) {
    // The hyper-parameters as the float32 values the step receives.
    const double b1 = 0.9f, b2 = 0.999f, lr = 1e-2f, wd = 0.1f, eps = 1e-8f;
    const double mm = b1 * m0[i] + (1 - b1) * g[i];
    const double vv = b2 * v0[i] + (1 - b2) * double(g[i]) * g[i];
    const double bc1 = 1 - std::pow(b1, 5), bc2 = 1 - std::pow(b2, 5);
    const double pp = p0[i] * (1 - lr * wd) - lr / bc1 * mm / (std::sqrt(vv) / std::sqrt(bc2) + eps);
    REQUIRE(m[i] == Approx(mm).epsilon(1e-5).margin(1e-7));
    REQUIRE(v[i] == Approx(vv).epsilon(1e-5).margin(1e-9));
    REQUIRE(p[i] == Approx(pp).epsilon(1e-5).margin(1e-6));
  }
}

TEST_CASE("AdamW workloads: in-out state with expected values, bf16 copies as outputs", "[adamw]") {
  const Family& f = multi_tensor_family();
  const Workload w = f.make_workload(Problem{"bf16", {{"tensors", 2}, {"numel", 33}}}, 3);
  REQUIRE(w.buffers.size() == 10);
  CHECK(w.buffers[0].name == "param[0]");
  CHECK(w.buffers[0].role == Role::kInOut);
  CHECK(w.buffers[1].role == Role::kInput);
  CHECK(w.buffers[4].dtype == DType::kBF16);
  CHECK(w.buffers[4].role == Role::kOutput);
  CHECK(w.buffers[0].expected.size() == 33 * 4);
  CHECK(w.buffers[0].expected != w.buffers[0].bytes);  // the step changes the parameters
  const Workload w2 = f.make_workload(Problem{"bf16", {{"tensors", 2}, {"numel", 33}}}, 4);
  CHECK(w2.buffers[0].bytes != w.buffers[0].bytes);  // fresh data per seed
  // The eager family adds its scratch buffer.
  CHECK(eager_family().make_workload(Problem{"f32", {{"tensors", 1}, {"numel", 8}}}, 1).buffers.back().role ==
        Role::kScratch);
}

TEST_CASE("multi-tensor plan: tensors split by tensors_per_launch, grid capped by blocks per SM", "[adamw]") {
  const Family& f = multi_tensor_family();
  const Problem p{"f32", {{"tensors", 40}, {"numel", 100000}}};
  Config c = f.default_config(p);
  c.set("tensors_per_launch", 16);
  c.set("chunk", 8192);
  c.set("blocks_per_sm", 1);
  std::vector<std::uint64_t> addresses(4 * 40);
  for (std::size_t i = 0; i < addresses.size(); ++i) addresses[i] = 0x1000 * (i + 1);
  const auto device = DeviceLimits::for_arch("sm_90");
  const auto plan = f.plan(c, p, addresses, device);
  REQUIRE(plan.size() == 3);  // 16 + 16 + 8 tensors
  // 13 chunks of 8192 per tensor, 208 chunks per full launch, capped at one block per SM.
  CHECK(plan[0].grid[0] == static_cast<unsigned>(std::min(208, device.sm_count)));
  CHECK(plan[2].grid[0] == 104);
  CHECK(plan[0].args.count() == 5);  // TensorList by value, chunk, Hyper, clip norm address, max_norm
}

TEST_CASE("eager plan: eight primitive launches per tensor, nine with the bf16 copy", "[adamw]") {
  const Family& f = eager_family();
  const Problem p{"f32", {{"tensors", 3}, {"numel", 1000}}};
  std::vector<std::uint64_t> addresses(3 * 4 + 1, 0x100);
  CHECK(f.plan(f.default_config(p), p, addresses, DeviceLimits::for_arch("sm_80")).size() == 24);
  const Problem pb{"bf16", {{"tensors", 3}, {"numel", 1000}}};
  std::vector<std::uint64_t> addresses_b(3 * 5 + 1, 0x100);
  CHECK(f.plan(f.default_config(pb), pb, addresses_b, DeviceLimits::for_arch("sm_80")).size() == 27);
  CHECK(f.render(f.default_config(p), p).kernels.size() == 8);
}

TEST_CASE("constraints reject chunks smaller than one block-wide step", "[adamw]") {
  const Family& f = multi_tensor_family();
  const Problem p = f.problem_classes().front();
  Config c = f.default_config(p);
  c.set("threads", 1024);
  c.set("vec", 4);
  c.set("chunk", 2048);
  std::string why;
  CHECK_FALSE(f.is_valid(c, p, DeviceLimits::for_arch("sm_90"), &why));
  CHECK_THAT(why, Catch::Contains("idle"));
}

}  // namespace templates_adamw_test
