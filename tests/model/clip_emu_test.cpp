// Gradient clipping in the training step (walk_adamw: every gradient scaled
// by min(1, max_norm / global L2 norm), then AdamW) on the emu backend, in
// compiled mode (grad_norm, then the fused AdamW reading the norm on the
// device) and eager mode (grad_norm scaling the gradients in place, then the
// eager AdamW), against the cpu backend (the norm in fp64 on the host); the
// norm a step clipped by is what each backend reports for it.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <span>
#include <vector>

#include "model/device_model.hpp"
#include "model/flat_adamw.hpp"
#include "model/parameters.hpp"
#include "model/transformer.hpp"

namespace model_clip_emu_test {

using namespace ktune;
using namespace ktune::model;

namespace {

const ModelConfig kConfig = model_config("tiny");
const RunShape kShape{1, 8};

/// Relative L2 norm of (got - base) - (want - base): the error of an update.
double update_error(std::span<const float> got, std::span<const float> want, std::span<const float> base) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < base.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i], u = static_cast<double>(want[i]) - base[i];
    num += d * d;
    den += u * u;
  }
  return std::isnan(num) || den == 0 ? INFINITY : std::sqrt(num / den);
}

/// Sum of |after - before|: how far a step moved the parameters.
double moved(std::span<const float> after, std::span<const float> before) {
  double sum = 0;
  for (std::size_t i = 0; i < before.size(); ++i) sum += std::abs(static_cast<double>(after[i]) - before[i]);
  return sum;
}

/// The cpu backend's parameters after one step from `params` and `grads`.
std::vector<float> cpu_step(const std::vector<float>& params, const std::vector<float>& grads,
                            const templates::adamw::AdamwHyper& hyper) {
  Transformer<float> cpu(kConfig, kShape, Allocation::kTrain, 2);
  std::copy(params.begin(), params.end(), cpu.parameters().begin());
  std::copy(grads.begin(), grads.end(), cpu.gradients().begin());
  cpu.step(hyper);
  return {cpu.parameters().begin(), cpu.parameters().end()};
}

}  // namespace

TEST_CASE("emu backend: a step that clips the gradients by their global norm gives the cpu backend's parameters",
          "[emu][model][clip]") {
  const ParameterLayout layout = parameter_layout(kConfig);
  std::vector<float> params(static_cast<std::size_t>(layout.total)), grads(params.size());
  init_parameters<float>(layout, params.data(), 5);
  std::mt19937_64 rng(6);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  for (auto& g : grads) g = normal(rng);
  double sq = 0;
  for (const float g : grads) sq += static_cast<double>(g) * g;
  const double norm = std::sqrt(sq);

  // eps far above every gradient makes AdamW's first update nearly linear in
  // the gradient, so a clip shows in it (with eps 1e-8 the first update is
  // lr * sign(g), blind to any scale); no weight decay, so only the gradient moves.
  templates::adamw::AdamwHyper hyper;
  hyper.lr = 1e-2f;
  hyper.eps = 1.0f;
  hyper.weight_decay = 0.0f;
  templates::adamw::AdamwHyper off = hyper;
  off.max_grad_norm = 0.0f;
  templates::adamw::AdamwHyper clipped = hyper;
  clipped.max_grad_norm = static_cast<float>(norm / 4);  // factor 1/4: the clip bites

  const auto cpu_off = cpu_step(params, grads, off);
  const auto cpu_clipped = cpu_step(params, grads, clipped);
  // Clipping off is the unclipped AdamW, bit for bit.
  std::vector<float> reference = params;
  ktune::test::FlatAdamW opt(layout.total, off);
  Parallel parallel(2);
  opt.step(reference, grads, parallel);
  CHECK(cpu_off == reference);
  // Clipping on moves the parameters a quarter as far.
  CHECK(moved(cpu_clipped, params) / moved(cpu_off, params) == Approx(0.25).epsilon(1e-2));
  // A threshold above the norm changes nothing.
  templates::adamw::AdamwHyper loose = hyper;
  loose.max_grad_norm = static_cast<float>(2 * norm);
  CHECK(cpu_step(params, grads, loose) == cpu_off);
  {  // the norm the step clipped by, before clipping; none from a step that did not clip
    Transformer<float> cpu(kConfig, kShape, Allocation::kTrain, 2);
    std::copy(grads.begin(), grads.end(), cpu.gradients().begin());
    CHECK_FALSE(cpu.grad_norm());
    cpu.step(clipped);
    REQUIRE(cpu.grad_norm());
    CHECK(*cpu.grad_norm() == Approx(norm).epsilon(1e-12));
    cpu.step(off);
    CHECK_FALSE(cpu.grad_norm());
  }

  auto backend = tuner::exec::make_emu_backend();
  for (const Mode mode : {Mode::kCompiled, Mode::kEager}) {
    for (const bool clip : {true, false}) {
      INFO(to_string(mode) << (clip ? ", clipping" : ", not clipping"));
      DeviceTransformer emu(*backend, kConfig, kShape, Allocation::kTrain, {.mode = mode});
      emu.set_parameters(params);
      emu.set_gradients(grads);
      const LaunchCount before = emu.ops().launches();
      emu.step(clip ? clipped : off);
      const LaunchCount launched = emu.ops().launches().since(before);
      CHECK(launched.by_family.count("grad_norm") == (clip ? 1 : 0));
      CHECK(update_error(emu.parameters(), clip ? cpu_clipped : cpu_off, params) <= 1e-5);
      const auto reported = emu.grad_norm();
      CHECK(reported.has_value() == clip);
      if (clip) CHECK(*reported == Approx(norm).epsilon(1e-5));  // fp32 partials summed in order
    }
  }
}

}  // namespace model_clip_emu_test
