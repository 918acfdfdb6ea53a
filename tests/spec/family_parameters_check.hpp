// A built-in family's run-time parameters given at launch through the
// run-time API, checked against the CPU references on fresh random data,
// outputs poisoned first: fused multi-tensor AdamW with a program's
// hyper-parameters and step, a softmax at its scale, a primitive's alpha; and
// what is refused. Shared by the emu test and its gpu twin.
#pragma once
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ktune/ktune.hpp"
#include "templates/adamw/reference.hpp"
#include "templates/softmax/reference.hpp"

namespace ktune::test {

/// Element by element within `relative` of the references (and a hundredth of it absolute, for values near 0).
inline void check_family_parameters(ktune::Runtime& rt, double relative) {
  std::mt19937 rng(std::random_device{}());
  const auto random = [&](std::size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    return v;
  };
  const auto device = [&](const std::vector<float>& host) {
    const std::uint64_t at = rt.allocate(host.size() * 4);
    rt.upload(at, host.data(), host.size() * 4);
    return at;
  };
  const auto host = [&](std::uint64_t at, std::size_t n) {
    std::vector<float> v(n);
    rt.download(v.data(), at, n * 4);
    return v;
  };

  // Fused multi-tensor AdamW, two ragged tensors, every hyper-parameter and the step the program's own.
  const std::size_t n = 1031;
  const ktune::Kernel adamw = rt.kernel("adamw", {"f32", {{"tensors", 2}, {"numel", static_cast<std::int64_t>(n)}}});
  // Shown as the decimals they were written as, not as their f32 roundings (0.9, not 0.899999976).
  const ktune::Parameters workload{{"lr", 0.01},  {"beta1", 0.9}, {"beta2", 0.999},
                                   {"eps", 1e-8}, {"step", 3},    {"weight_decay", 0.1}};
  CHECK(adamw.parameters() == workload);
  const ktune::Parameters mine{{"lr", 3e-3},          {"beta1", 0.8},  {"beta2", 0.95},
                               {"eps", 1e-6},         {"step", 7},     {"weight_decay", 0.05}};
  ktune::templates::adamw::AdamwHyper h;
  h.lr = 3e-3f, h.beta1 = 0.8f, h.beta2 = 0.95f, h.eps = 1e-6f, h.weight_decay = 0.05f, h.step = 7;
  std::vector<std::uint64_t> buffers;
  std::vector<std::vector<float>> expected;
  for (int t = 0; t < 2; ++t) {
    auto p = random(n, -1, 1), g = random(n, -1, 1), m = random(n, -0.1f, 0.1f), v = random(n, 0, 0.01f);
    for (const auto* b : {&p, &g, &m, &v}) buffers.push_back(device(*b));
    ktune::templates::adamw::adamw_step_reference(p.data(), g.data(), m.data(), v.data(), n, h);
    expected.insert(expected.end(), {p, m, v});
  }
  adamw.launch(buffers, mine);
  for (int t = 0; t < 2; ++t)
    for (int k = 0; k < 3; ++k) {  // param, exp_avg, exp_avg_sq
      const auto got = host(buffers[4 * t + (k ? k + 1 : 0)], n);
      const auto& want = expected[3 * t + k];
      for (std::size_t i = 0; i < n; ++i) REQUIRE(got[i] == Approx(want[i]).epsilon(relative).margin(relative / 100));
    }
  CHECK_THROWS_WITH(adamw.launch(buffers, {{"step", 0}}),
                    Catch::Contains("adamw: step must be a whole number from 1"));
  CHECK_THROWS_WITH(adamw.launch(buffers, {{"step", 2.5}}), Catch::Contains("got 2.5"));
  CHECK_THROWS_WITH(adamw.launch(buffers, {{"beta2", 1}}), Catch::Contains("adamw: beta2 must be in [0, 1)"));
  CHECK_THROWS_WITH(adamw.launch(buffers, {{"lr", -1}}), Catch::Contains("adamw: lr must be >= 0"));
  CHECK_THROWS_WITH(adamw.launch(buffers, {{"lr", 1e39}}), Catch::Contains("past the range of f32"));
  CHECK_THROWS_WITH(adamw.launch(buffers, {{"betas", 0.9}}),
                    Catch::Contains("adamw: no parameter 'betas'; its parameters: beta1, beta2, eps, lr, step, "
                                    "weight_decay"));

  // Row softmax at the program's scale, poisoned output first.
  const std::int64_t rows = 37, cols = 203;
  const auto x = random(rows * cols, -4, 4);
  const ktune::Kernel softmax = rt.kernel("softmax_fwd", {"f32", {{"rows", rows}, {"cols", cols}, {"causal", 0}}});
  REQUIRE(softmax.parameters().count("scale") == 1);
  const std::uint64_t dx = device(x), dy = device(std::vector<float>(rows * cols, NAN));
  softmax.launch({dx, dy}, {{"scale", 0.3}});
  std::vector<double> xd(x.begin(), x.end()), want(x.size());
  ktune::templates::softmax::softmax_forward<double>(xd.data(), want.data(), rows, cols, 0.3, false);
  const auto y = host(dy, x.size());
  for (std::size_t i = 0; i < y.size(); ++i) REQUIRE(y[i] == Approx(want[i]).epsilon(relative).margin(relative / 100));

  // A primitive's alpha.
  const ktune::Kernel scale = rt.kernel("prim_scale", {"f32", {{"n", rows * cols}}});
  rt.upload(dy, std::vector<float>(x.size(), NAN).data(), x.size() * 4);
  scale.launch({dx, dy}, {{"alpha", -2.5}});
  const auto scaled = host(dy, x.size());
  for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(scaled[i] == -2.5f * x[i]);}

}  // namespace ktune::test
