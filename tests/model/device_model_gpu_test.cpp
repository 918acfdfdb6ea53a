// The device backend's step on a GPU against the cpu backend, the twin of
// device_model_emu_test.cpp at the small model's size: kernels through NVRTC,
// GEMMs through cuBLASLt (fp32 compute), in compiled mode and in eager mode
// (the decomposed ops as chains of primitive kernels), and in bf16 mixed
// precision (bf16 GEMMs on cuBLASLt, the families' bf16 problems) at the
// tiny model's size; its passes replayed as CUDA graphs, or launched with
// programmatic dependent launch, give the run op by op's. Skipped without a
// device.
#include "model/device_model.hpp"

#include <catch2/catch.hpp>

#include <map>

#include "model/device_check.hpp"
#include "model/transformer.hpp"
#include "support.hpp"
#include "templates/render.hpp"

namespace model_device_model_gpu_test {

using namespace ktune;
using namespace ktune::model;

using test::random_tokens;
using test::rel_l2;

TEST_CASE("cuda backend: the small model's loss and gradients match the cpu backend", "[gpu][model][device]") {
  test::skip_without_gpu();
  auto backend = tuner::exec::make_cuda_backend();
  const ModelConfig config = model_config("small");
  const RunShape shape{2, 100};  // context not a multiple of 8
  std::map<Mode, LaunchCount> launched;  // by the forward and backward
  for (const Mode mode : {Mode::kCompiled, Mode::kEager}) {
    INFO(to_string(mode));
    Transformer<float> cpu(config, shape, Allocation::kTrain, 8);
    DeviceTransformer gpu(*backend, config, shape, Allocation::kTrain, {.mode = mode});
    std::vector<std::int32_t> tokens, targets;
    random_tokens(shape.tokens(), config.vocab, 23, tokens, targets);
    const double want = cpu.forward(tokens, targets);
    const LaunchCount before = gpu.ops().launches();
    CHECK(gpu.forward(tokens, targets) == Approx(want).epsilon(1e-5));
    cpu.backward();
    gpu.backward();
    launched[mode] = gpu.ops().launches().since(before);
    const auto grads = gpu.gradients();
    for (const auto& t : cpu.layout().tensors) {
      INFO(t.name);
      CHECK(rel_l2(grads, cpu.gradients(), t.offset, t.numel) <= 1e-4);
    }
    // AdamW from the same gradients.
    templates::adamw::AdamwHyper hyper;
    std::vector<float> params(cpu.parameters().begin(), cpu.parameters().end());
    std::vector<float> m(params.size(), 0.0f), v(params.size(), 0.0f);
    gpu.set_gradients(cpu.gradients());
    gpu.step(hyper);
    hyper.step = 1;
    templates::adamw::adamw_step_reference(params.data(), cpu.gradients().data(), m.data(), v.data(), params.size(),
                                           hyper);
    CHECK(rel_l2(gpu.parameters(), params, 0, static_cast<std::int64_t>(params.size())) <= 1e-6);
  }
  // Eager mode ran the decomposed ops as their chains: more launches, primitive ones among them.
  const auto& compiled = launched.at(Mode::kCompiled);
  const auto& eager = launched.at(Mode::kEager);
  INFO("compiled: " << compiled.str() << ", eager: " << eager.str());
  CHECK(eager.kernels > compiled.kernels);
  CHECK(eager.gemms == compiled.gemms + 6 * config.layers);  // compiled mode batches the projections
  CHECK(eager.by_family.count("prim_silu"));
  CHECK_FALSE(eager.by_family.count("rmsnorm_fwd"));
  CHECK(eager.by_family.count("prim_causal_mask"));  // attention's softmax chain
  CHECK(eager.by_family.count("prim_strided_copy"));  // RoPE's
  CHECK(eager.by_family.count("prim_gather_rows"));  // the embedding's
  CHECK_FALSE(eager.by_family.count("rope_fwd"));
  CHECK_FALSE(eager.by_family.count("embedding_fwd"));
  CHECK(compiled.by_family.count("rmsnorm_fwd"));
}

// A bf16 device model's forward and backward on a random batch against the
// cpu backend's, with the tolerances of device_model_emu_test.cpp's bf16
// cases, explained there.
void check_bf16_pass(Transformer<float>& cpu, DeviceTransformer& gpu, std::uint64_t seed) {
  std::vector<std::int32_t> tokens, targets;
  random_tokens(gpu.layout().shape.tokens(), gpu.layout().config.vocab, seed, tokens, targets);
  CHECK(gpu.forward(tokens, targets) == Approx(cpu.forward(tokens, targets)).epsilon(2e-3));
  cpu.backward();
  gpu.backward();
  const auto grads = gpu.gradients();
  for (const auto& t : cpu.layout().tensors) {
    INFO(t.name);
    CHECK(rel_l2(grads, cpu.gradients(), t.offset, t.numel) <= 5e-2);
  }
}

TEST_CASE("cuda backend, bf16: the tiny model's loss, gradients and AdamW step match the cpu backend",
          "[gpu][model][device]") {
  test::skip_without_gpu();
  auto backend = tuner::exec::make_cuda_backend();
  const ModelConfig config = model_config("tiny");
  const RunShape shape{2, 100};  // context not a multiple of 8
  for (const Mode mode : {Mode::kCompiled, Mode::kEager}) {
    INFO(to_string(mode));
    Transformer<float> cpu(config, shape, Allocation::kTrain, 8);
    DeviceTransformer gpu(*backend, config, shape, Allocation::kTrain, {.mode = mode, .precision = Precision::kBf16});
    check_bf16_pass(cpu, gpu, 29);
    // AdamW from the same gradients on the fp32 master weights, and their bf16 copy.
    templates::adamw::AdamwHyper hyper;
    std::vector<float> params(cpu.parameters().begin(), cpu.parameters().end());
    std::vector<float> m(params.size(), 0.0f), v(params.size(), 0.0f);
    gpu.set_gradients(cpu.gradients());
    gpu.step(hyper);
    hyper.step = 1;
    templates::adamw::adamw_step_reference(params.data(), cpu.gradients().data(), m.data(), v.data(), params.size(),
                                           hyper);
    const auto stepped = gpu.parameters();
    CHECK(rel_l2(stepped, params, 0, static_cast<std::int64_t>(params.size())) <= 1e-6);
    const auto copy = gpu.weight_copy();
    std::int64_t differ = 0;
    for (std::size_t i = 0; i < stepped.size(); ++i) differ += copy[i] != templates::float_to_bf16_bits(stepped[i]);
    CHECK(differ == 0);
  }
}

TEST_CASE("cuda backend, bf16 compiled: q, k and v one fused projection, read on strided rows by the device's "
          "default flash attention (sm_90: wgmma), match the cpu backend",
          "[gpu][model][device]") {
  test::skip_without_gpu();
  auto backend = tuner::exec::make_cuda_backend();
  // The small model's widths, two layers, at a shape whose grid (1024 / 128 query blocks x 12 heads x 4) is busy
  // enough for sm_90's wgmma forward.
  ModelConfig config = model_config("small");
  config.layers = 2;
  const RunShape shape{4, 1024};
  Transformer<float> cpu(config, shape, Allocation::kTrain, 16);
  DeviceTransformer gpu(*backend, config, shape, Allocation::kTrain,
                        {.mode = Mode::kCompiled, .precision = Precision::kBf16});
  REQUIRE(gpu.layout().fused_qkv);
  check_bf16_pass(cpu, gpu, 31);
  for (const auto& k : gpu.ops().kernels().kernels())
    if (k.family->name() == "attention_fwd" && backend->device().arch == "sm_90") {
      INFO(k.chosen.config.str());
      CHECK(k.chosen.config.at("mma") != 0);
    }
}

}  // namespace model_device_model_gpu_test

namespace model_device_model_gpu_test {

using namespace ktune;
using namespace ktune::model;

TEST_CASE("cuda backend: the small model's passes replayed as CUDA graphs, or launched programmatically, give the "
          "run op by op's",
          "[gpu][model][device]") {
  test::skip_without_gpu();
  const ModelConfig config = model_config("small");
  const RunShape shape{2, 100};
  constexpr int kSteps = 3;
  for (const Precision precision : {Precision::kF32, Precision::kBf16}) {
    // fp32: the same kernels on the same data, up to the order of atomic
    // adds; bf16 rounds each activation, which such an order can flip.
    const double tolerance = precision == Precision::kBf16 ? 1e-2 : 1e-4;
    templates::adamw::AdamwHyper hyper;
    const auto batch = [&](int step, std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& targets) {
      test::random_tokens(shape.tokens(), config.vocab, 40 + step, tokens, targets);
    };
    // The run op by op, each step's loss and gradients, and the parameters after the last.
    std::vector<double> losses;
    std::vector<std::vector<float>> gradients;
    std::vector<float> parameters;
    {
      auto backend = tuner::exec::make_cuda_backend();
      DeviceTransformer direct(*backend, config, shape, Allocation::kTrain,
                               {.mode = Mode::kCompiled, .precision = precision});
      for (int step = 0; step < kSteps; ++step) {
        std::vector<std::int32_t> tokens, targets;
        batch(step, tokens, targets);
        losses.push_back(direct.forward(tokens, targets));
        direct.backward();
        gradients.push_back(direct.gradients());
        direct.step(hyper);
      }
      parameters = direct.parameters();
    }
    struct Variant {
      bool graphs, programmatic;
    };
    for (const Variant variant : {Variant{true, false}, Variant{false, true}, Variant{true, true}}) {
      INFO(to_string(precision) << (variant.graphs ? ", graphs" : "")
                                << (variant.programmatic ? ", programmatic dependent launch" : ""));
      auto backend = tuner::exec::make_cuda_backend();
      backend->set_programmatic(variant.programmatic);
      DeviceTransformer other(*backend, config, shape, Allocation::kTrain,
                              {.mode = Mode::kCompiled, .precision = precision, .graphs = variant.graphs});
      for (int step = 0; step < kSteps; ++step) {
        INFO("step " << step);
        std::vector<std::int32_t> tokens, targets;
        batch(step, tokens, targets);
        CHECK(other.forward(tokens, targets) == Approx(losses[step]).epsilon(tolerance / 10));
        other.backward();
        CHECK(test::rel_l2(other.gradients(), gradients[step], 0, other.layout().params.total) <= tolerance);
        other.step(hyper);
      }
      if (variant.graphs) {
        CHECK(other.forward_graph_nodes() > 0);
        CHECK(other.backward_graph_nodes() > 0);
      }
      CHECK(test::rel_l2(other.parameters(), parameters, 0, other.layout().params.total) <= tolerance);
    }
  }
}

}  // namespace model_device_model_gpu_test
