// AdamW with clip-by-norm folded into the step, run by the host emulation
// against the CPU reference: clip off, a norm below the threshold (factor 1),
// above it and NaN, the fused multi-tensor and single-tensor families, f32 and
// bf16 (the bf16 copy), ragged tensors; and a broken variant that must fail.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>

#include "templates/adamw/adamw.hpp"
#include "templates/emulated_plan.hpp"
#include "templates/grad_norm/reference.hpp"
#include "templates/render.hpp"

namespace templates_adamw_emu_test {

using namespace ktune;
using namespace ktune::templates;
using namespace ktune::templates::adamw;

namespace {

/// A device buffer in the emulation holding `values` (poisoned beyond them).
tuner::emu::GuardedBuffer& device_copy(std::vector<std::unique_ptr<tuner::emu::GuardedBuffer>>& buffers,
                                       const std::string& name, const void* values, std::size_t bytes) {
  auto& b = *buffers.emplace_back(std::make_unique<tuner::emu::GuardedBuffer>(name, bytes));
  b.fill(0xff);
  if (values) std::memcpy(b.data(), values, bytes);
  return b;
}

enum class ClipCase { kOff, kBelow, kAbove, kNaN };

/// The largest relative L2 error of param, exp_avg, exp_avg_sq (fp32: 1e-5)
/// and the bf16 copy (1e-2), as a multiple of its tolerance, after one step of
/// `family` from `rendered` with clipping as `clip_case` says, against the
/// reference. A NaN norm (kNaN) makes every output NaN, as torch's clip and
/// step do: 0 where each is, infinity where one is not.
double clipped_step_error(const AdamwFamily& family, const Rendered& rendered, const Problem& p, ClipCase clip_case) {
  const auto tensors = static_cast<std::size_t>(p.dim("tensors"));
  const auto numel = p.dim("numel");
  const bool bf16 = p.dtype == "bf16";
  std::mt19937_64 rng(5);
  std::vector<std::unique_ptr<tuner::emu::GuardedBuffer>> buffers;
  std::vector<std::vector<float>> param, grad, m, v;
  std::vector<TensorAddresses> addresses;
  std::vector<std::vector<double>> grads64;
  for (std::size_t t = 0; t < tensors; ++t) {
    const auto n = static_cast<std::size_t>(numel - static_cast<std::int64_t>(t) * 7);  // ragged sizes
    param.push_back(random_floats(rng, n, -1.f, 1.f));
    grad.push_back(random_floats(rng, n, -1.f, 1.f));
    m.push_back(random_floats(rng, n, -0.1f, 0.1f));
    v.push_back(random_floats(rng, n, 0.f, 0.01f));
    grads64.emplace_back(grad.back().begin(), grad.back().end());
    TensorAddresses a;
    a.param = reinterpret_cast<std::uint64_t>(device_copy(buffers, "param", param.back().data(), n * 4).data());
    a.grad = reinterpret_cast<std::uint64_t>(device_copy(buffers, "grad", grad.back().data(), n * 4).data());
    a.exp_avg = reinterpret_cast<std::uint64_t>(device_copy(buffers, "exp_avg", m.back().data(), n * 4).data());
    a.exp_avg_sq = reinterpret_cast<std::uint64_t>(device_copy(buffers, "exp_avg_sq", v.back().data(), n * 4).data());
    if (bf16) a.param_bf16 = reinterpret_cast<std::uint64_t>(device_copy(buffers, "param_bf16", nullptr, n * 2).data());
    a.numel = static_cast<std::int64_t>(n);
    addresses.push_back(a);
  }
  // The norm as grad_norm leaves it in device memory.
  const auto norm = clip_case == ClipCase::kNaN ? NAN : static_cast<float>(grad_norm::global_norm(grads64));
  auto& norm_buffer = device_copy(buffers, "norm", &norm, sizeof norm);
  Args args;
  args.tensors = addresses;
  args.hyper = AdamwFamily::workload_hyper();
  float scale = 1.0f;
  if (clip_case != ClipCase::kOff) {
    args.clip.norm = reinterpret_cast<std::uint64_t>(norm_buffer.data());
    args.clip.max_norm = clip_case == ClipCase::kNaN     ? 1.0f
                         : clip_case == ClipCase::kAbove ? 0.37f * norm
                                                         : 2.0f * norm;
    scale = static_cast<float>(grad_norm::clip_factor(norm, args.clip.max_norm));
    if (clip_case != ClipCase::kNaN) CHECK((clip_case == ClipCase::kAbove ? scale < 0.5f : scale == 1.0f));
  }
  const Config config = family.default_config(p);
  auto launches = family.plan(config, p, args, tuner::EmuRunner().device());
  const auto module = tuner::emu::load_module(rendered);
  test::run_emulated(*module, launches, buffers, 1);

  // Relative L2 error over the tolerance: at most 1 passes; NaN never does.
  double worst = 0;
  auto error_of = [&](std::uint64_t address, DType dtype, const std::vector<float>& expected, double tolerance) {
    double diff = 0, norm2 = 0;
    for (std::size_t i = 0; i < expected.size(); ++i) {
      float got = 0;
      if (dtype == DType::kBF16) {
        std::uint16_t bits;
        std::memcpy(&bits, reinterpret_cast<const std::byte*>(address) + 2 * i, 2);
        const std::uint32_t word = std::uint32_t{bits} << 16;
        std::memcpy(&got, &word, 4);
      } else {
        std::memcpy(&got, reinterpret_cast<const std::byte*>(address) + 4 * i, 4);
      }
      if (clip_case == ClipCase::kNaN) {
        if (!std::isnan(got)) worst = INFINITY;
        continue;
      }
      if (!std::isfinite(got)) return void(worst = INFINITY);
      diff += (double(got) - expected[i]) * (double(got) - expected[i]);
      norm2 += double(expected[i]) * expected[i];
    }
    if (clip_case != ClipCase::kNaN) worst = std::max(worst, std::sqrt(diff / norm2) / tolerance);
  };
  for (std::size_t t = 0; t < tensors; ++t) {
    adamw_step_reference(param[t].data(), grad[t].data(), m[t].data(), v[t].data(), param[t].size(), args.hyper,
                         scale);
    error_of(addresses[t].param, DType::kF32, param[t], 1e-5);
    error_of(addresses[t].exp_avg, DType::kF32, m[t], 1e-5);
    error_of(addresses[t].exp_avg_sq, DType::kF32, v[t], 1e-5);
    if (bf16) error_of(addresses[t].param_bf16, DType::kBF16, param[t], 1e-2);
  }
  return worst;
}

}  // namespace

TEST_CASE("adamw: clip by the global norm as the step reads the gradient", "[adamw][emu]") {
  for (const AdamwFamily* f : {&multi_tensor_family(), &single_tensor_family()})
    for (const char* dtype : {"f32", "bf16"}) {
      const Problem p{dtype, {{"tensors", 3}, {"numel", 4999}}};
      const Rendered rendered = f->render(f->default_config(p), p);
      for (const ClipCase c : {ClipCase::kOff, ClipCase::kBelow, ClipCase::kAbove, ClipCase::kNaN}) {
        INFO(f->name() << " " << dtype << " clip case " << static_cast<int>(c));
        CHECK(clipped_step_error(*f, rendered, p, c) <= 1.0);
      }
    }
}

TEST_CASE("adamw: a step that ignores the clip fails the same check", "[adamw][emu]") {
  const AdamwFamily& f = multi_tensor_family();
  const Problem p{"f32", {{"tensors", 3}, {"numel", 4999}}};
  const Rendered good = f.render(f.default_config(p), p);
  const Rendered broken = test::broken(good, "gv.v[k] *= clip;", "gv.v[k] *= 1.0f;");
  CHECK(clipped_step_error(f, broken, p, ClipCase::kAbove) > 100.0);
  CHECK(clipped_step_error(f, broken, p, ClipCase::kOff) <= 1.0);  // the unclipped path is untouched
}

TEST_CASE("adamw_eager refuses the clip: eager clips with grad_norm's own launch", "[adamw][emu]") {
  const AdamwFamily& f = eager_family();
  const Problem p{"f32", {{"tensors", 1}, {"numel", 8}}};
  Args args;
  args.tensors = {{0x1000, 0x2000, 0x3000, 0x4000, 0, 8}};
  args.workspace = 0x5000;
  args.clip = {0x6000, 1.0f};
  CHECK_THROWS_WITH(f.plan(f.default_config(p), p, args, DeviceLimits::for_arch("sm_90")),
                    Catch::Contains("does not clip"));
}

}  // namespace templates_adamw_emu_test
