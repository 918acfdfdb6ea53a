// Gradient accumulation on a GPU, the twin of accumulate_emu_test.cpp at the
// small model's size: a step of micro-batches gives the cpu backend's
// gradients of one batch of all their windows, in compiled and eager mode
// (fp32, cuBLASLt's GEMMs adding with beta = 1), and with CUDA graphs (both
// backward passes, writing and adding, captured) the steps of the run op by
// op, each step reporting the norm it clipped by. Skipped without a device.
#include <catch2/catch.hpp>

#include <cmath>

#include "model/accumulate_check.hpp"
#include "model/device_check.hpp"
#include "model/parameters.hpp"
#include "support.hpp"

namespace model_accumulate_gpu_test {

using namespace ktune;
using namespace ktune::model;

TEST_CASE("cuda backend: the small model's micro-batches' gradients are the cpu's of one batch of their windows",
          "[gpu][model][accumulate]") {
  test::skip_without_gpu();
  const ModelConfig config = model_config("small");
  const RunShape shape{2, 100, 2};  // context not a multiple of 8
  std::vector<std::int32_t> tokens, targets;
  test::random_tokens(shape.step_tokens(), config.vocab, 31, tokens, targets);
  std::vector<float> params;
  test::AccumulatedStep want;
  for (const Mode mode : {Mode::kCompiled, Mode::kEager}) {
    INFO(to_string(mode));
    BackendOptions b;
    b.backend = "cuda";
    b.mode = mode;
    auto rt = make_runtime(config, shape, Allocation::kTrain, b);
    if (params.empty()) {
      params.resize(static_cast<std::size_t>(rt->layout().total));
      init_parameters<float>(rt->layout(), params.data(), 8);
      want = test::whole_batch_step(config, shape, params, tokens, targets);
    }
    rt->set_parameters(params);
    const auto got = test::accumulate_step(*rt, shape, tokens, targets);
    CHECK(got.loss == Approx(want.loss).epsilon(1e-5));
    for (const auto& t : rt->layout().tensors) {
      INFO(t.name);
      CHECK(test::rel_l2(got.grads, want.grads, t.offset, t.numel) <= 1e-4);
    }
  }
}

TEST_CASE("cuda backend, compiled bf16 with CUDA graphs: steps of micro-batches match the run op by op",
          "[gpu][model][accumulate][graphs]") {
  test::skip_without_gpu();
  const ModelConfig config = model_config("small");
  const RunShape shape{2, 128, 3};
  BackendOptions b;
  b.backend = "cuda";
  b.precision = Precision::kBf16;
  auto plain = make_runtime(config, shape, Allocation::kTrain, b);
  b.graphs = true;
  auto graphed = make_runtime(config, shape, Allocation::kTrain, b);
  std::vector<float> params(static_cast<std::size_t>(plain->layout().total));
  init_parameters<float>(plain->layout(), params.data(), 5);
  plain->set_parameters(params);
  graphed->set_parameters(params);
  templates::adamw::AdamwHyper hyper;
  hyper.max_grad_norm = 1.0f;
  for (std::uint64_t step = 0; step < 3; ++step) {
    INFO("step " << step + 1);
    std::vector<std::int32_t> tokens, targets;
    test::random_tokens(shape.step_tokens(), config.vocab, 40 + step, tokens, targets);
    // The same kernels on the same data, up to the order of atomic adds,
    // which can flip a bf16 rounding (device_model_gpu_test.cpp's tolerance).
    const auto a = test::accumulate_step(*plain, shape, tokens, targets);
    const auto c = test::accumulate_step(*graphed, shape, tokens, targets);
    CHECK(c.loss == Approx(a.loss).epsilon(1e-3));
    CHECK(test::rel_l2(c.grads, a.grads, 0, plain->layout().total) <= 1e-2);
    plain->step(hyper);
    graphed->step(hyper);
    // The norm each step clipped by: the accumulated gradients' (fp32 partials on the device, fp64 here).
    double sq = 0;
    for (const float g : a.grads) sq += static_cast<double>(g) * g;
    REQUIRE(plain->grad_norm());
    CHECK(*plain->grad_norm() == Approx(std::sqrt(sq)).epsilon(1e-4));
  }
  CHECK(test::rel_l2(graphed->parameters(), plain->parameters(), 0, plain->layout().total) <= 1e-2);
  CHECK(graphed->kernel_summary().find("graphs of") != std::string::npos);
}

}  // namespace model_accumulate_gpu_test
