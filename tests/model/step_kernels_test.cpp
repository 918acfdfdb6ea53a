// The (family, problem) list of one training step: what `ktune tune --model
// M --dtype D` tunes and what a device run in that precision and mode
// launches, with the dtypes it launches them at.
#include "model/step_kernels.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "base/error.hpp"
#include "model/ops/device_ops.hpp"
#include "model/parameters.hpp"

namespace model_step_kernels_test {

using namespace ktune;
using namespace ktune::model;

namespace {

// family name -> problem dtype, checking each family appears once and its problem is valid.
std::map<std::string, std::string> families_of(const std::vector<tuner::KernelRequest>& list) {
  std::map<std::string, std::string> out;
  for (const auto& r : list) {
    INFO(r.family->name() << " " << r.problem.key());
    CHECK_NOTHROW(r.family->check_problem(r.problem));
    CHECK(out.emplace(r.family->name(), r.problem.dtype).second);
  }
  return out;
}

}  // namespace

TEST_CASE("step kernels: AdamW's problem holds the model's tensor size, at most 2^27 elements in all", "[model]") {
  for (const char* name : {"tiny", "small", "xl", "2.7B"}) {
    INFO(name);
    const auto config = model_config(name);
    const auto layout = parameter_layout(config);
    const auto tensors = static_cast<std::int64_t>(layout.tensors.size());
    const auto p = adamw_problem(config, Precision::kBf16);
    CHECK(p.dtype == "bf16");
    CHECK(adamw_problem(config, Precision::kTf32).dtype == "f32");
    // Each tensor as large as the model's mean tensor: the fused kernel's chunks per tensor.
    CHECK(p.dim("numel") == (layout.total + tensors - 1) / tensors);
    if (layout.total <= kAdamwTunedElements) {
      CHECK(p.dim("tensors") == tensors);  // the whole model
    } else {
      // As many whole tensors as fit under the cap: far past the L2 cache, a fraction of the host memory.
      CHECK(p.dim("tensors") < tensors);
      CHECK(p.dim("tensors") * p.dim("numel") <= kAdamwTunedElements);
      CHECK((p.dim("tensors") + 1) * p.dim("numel") > kAdamwTunedElements);
    }
    const auto list = step_kernels(config, RunShape{4, 256}, Precision::kBf16);
    CHECK(list.back().family->name() == "adamw");
    CHECK(list.back().problem == p);
  }
}

TEST_CASE("step kernels: grad_norm's problem holds at most 2^27 elements, whatever the largest tensor", "[model]") {
  for (const char* name : {"tiny", "small", "xl", "2.7B"}) {
    INFO(name);
    const auto config = model_config(name);
    const auto layout = parameter_layout(config);
    const auto p = grad_norm_problem(config, false);
    CHECK(p.dtype == "f32");
    CHECK(p.dim("in_place") == 0);  // the fused AdamW applies the factor as it reads each gradient
    // A tuning workload of whole mean-size tensors: the xl model's largest
    // tensor times its 435 tensors would take over 100 GiB of host memory.
    CHECK(p.dim("tensors") * p.dim("numel") <= std::max(kAdamwTunedElements, p.dim("numel")));
    CHECK(p.dim("tensors") <= static_cast<std::int64_t>(layout.tensors.size()));
    const auto list = step_kernels(config, RunShape{4, 256}, Precision::kBf16);
    const auto in_list = std::find_if(list.begin(), list.end(),
                                      [](const tuner::KernelRequest& r) { return r.family->name() == "grad_norm"; });
    REQUIRE(in_list != list.end());
    CHECK(in_list->problem == p);
  }
}

TEST_CASE("step kernels: the families' problems of one training step, per precision", "[model]") {
  const auto config = model_config("tiny");
  const RunShape shape{2, 16};
  for (const Precision p : {Precision::kF32, Precision::kTf32, Precision::kBf16}) {
    INFO(to_string(p));
    const auto list = step_kernels(config, shape, p);
    const auto families = families_of(list);
    const std::string dtype = p == Precision::kBf16 ? "bf16" : "f32";
    for (const auto& [name, d] : families) CHECK(d == (name == "grad_norm" ? "f32" : dtype));  // fp32 gradients
    CHECK(families.count("rmsnorm_fwd"));
    CHECK(families.count("adamw"));
    CHECK(list.front().family->name() == "embedding_fwd");
    CHECK(list.front().problem.dim("rows") == shape.tokens());
    // Compiled mode: flash attention where a tf32 or bf16 kernel computes it,
    // materialised (the softmax pair between GEMMs) in fp32.
    const bool flash = p != Precision::kF32;
    CHECK(families.count("attention_fwd") == (flash ? 1 : 0));
    CHECK(families.count("attention_bwd") == (flash ? 1 : 0));
    CHECK(families.count("softmax_fwd") == (flash ? 0 : 1));
    CHECK(families.count("softmax_bwd") == (flash ? 0 : 1));
  }
  const auto scores = step_kernels(config, shape, Precision::kF32)[3].problem;
  CHECK(scores.dim("rows") == 2 * config.heads * 16);
  CHECK(scores.dim("cols") == 16);
  CHECK(scores.dim("causal") == 1);
  CHECK(parse_precision("tf32") == Precision::kTf32);
  CHECK_THROWS_AS(parse_precision("f16"), Error);
}

TEST_CASE("step kernels: a device run launches its precision's and mode's list", "[model]") {
  const auto config = model_config("tiny");
  const RunShape shape{1, 12};
  for (const Mode mode : {Mode::kEager, Mode::kCompiled}) {
    for (const Precision p : {Precision::kF32, Precision::kTf32, Precision::kBf16}) {
      INFO(to_string(mode) << " " << to_string(p));
      const StepLayout L = device_layout(config, shape, Allocation::kTrain, {.mode = mode, .precision = p});
      CHECK(L.precision == p);
      const bool flash = mode == Mode::kCompiled && p != Precision::kF32;
      CHECK(L.attention == (flash ? AttentionSaved::kLogSumExp : AttentionSaved::kProbabilities));
      const auto families = families_of(device_step_kernels(L, mode));
      CHECK(families.count("attention_fwd") == (flash ? 1 : 0));
      CHECK(families.count("softmax_fwd") == (flash ? 0 : 1));
      CHECK(families.count(mode == Mode::kEager ? "adamw_eager" : "adamw") == 1);
      // Compiled mode's AdamW applies the clip factor grad_norm writes; eager's is given the gradients scaled.
      for (const auto& r : device_step_kernels(L, mode))
        if (r.family->name() == "grad_norm") CHECK(r.problem == grad_norm_problem(config, mode == Mode::kEager));
      // What `tune --model --dtype` tunes is what compiled mode runs.
      if (mode == Mode::kCompiled) CHECK(families == families_of(step_kernels(config, shape, p)));
      // Every kernel runs the precision's problem, but grad_norm: gradients are fp32.
      for (const auto& [name, d] : families) CHECK(d == (name == "grad_norm" ? "f32" : problem_dtype(p)));
      // A run without gradients (eval, generate) compiles its forward's kernels alone: the same forward ones.
      const StepLayout forward = device_layout(config, shape, Allocation::kForwardOnly, {.mode = mode, .precision = p});
      const auto forward_families = families_of(device_step_kernels(forward, mode));
      std::map<std::string, std::string> expected;
      for (const auto& [name, d] : families)
        if (name.size() > 4 && name.substr(name.size() - 4) == "_fwd") expected[name] = d;
      CHECK(expected.size() == 7);
      CHECK(forward_families == expected);
      // Gradients without a step (eval's, bench's forward+backward): every kernel but the optimizer's.
      const StepLayout gradients = device_layout(config, shape, Allocation::kGradients,
                                                 {.mode = mode, .precision = p});
      auto without_step = families;
      CHECK(without_step.erase(mode == Mode::kEager ? "adamw_eager" : "adamw") == 1);
      CHECK(without_step.erase("grad_norm") == 1);
      CHECK(families_of(device_step_kernels(gradients, mode)) == without_step);
    }
  }
}

TEST_CASE("step kernels: compiled mode rotates q and k in one launch where they lie back to back", "[model]") {
  const auto rope_tokens = [](const std::vector<tuner::KernelRequest>& list, const char* family) {
    for (const auto& r : list)
      if (r.family->name() == family) return r.problem.dim("tokens");
    return std::int64_t{0};
  };
  ModelConfig config = model_config("tiny");
  const RunShape shape{1, 13};
  const std::int64_t n = shape.tokens();
  const StepLayout compiled = device_layout(config, shape, Allocation::kTrain, {.mode = Mode::kCompiled});
  const StepLayout eager = device_layout(config, shape, Allocation::kTrain, {.mode = Mode::kEager});
  CHECK(compiled.paired_rope);
  CHECK_FALSE(eager.paired_rope);  // PyTorch eager rotates each
  CHECK_FALSE(step_layout(config, shape, 1, Allocation::kTrain).paired_rope);  // the cpu backend's
  for (const char* family : {"rope_fwd", "rope_bwd"}) {
    INFO(family);
    CHECK(rope_tokens(device_step_kernels(compiled, Mode::kCompiled), family) == 2 * n);
    CHECK(rope_tokens(step_kernels(config, shape, Precision::kF32), family) == 2 * n);  // what `tune --model` tunes
    CHECK(rope_tokens(device_step_kernels(eager, Mode::kEager), family) == n);
  }
  // With flash attention (tf32, bf16), q, k and v are one fused projection's rows: RoPE over q and k of a
  // token, 2H heads of N tokens.
  for (const Precision p : {Precision::kTf32, Precision::kBf16}) {
    INFO(to_string(p));
    const StepLayout fused = device_layout(config, shape, Allocation::kTrain,
                                           {.mode = Mode::kCompiled, .precision = p});
    CHECK(fused.fused_qkv);
    CHECK_FALSE(fused.paired_rope);
    CHECK_FALSE(device_layout(config, shape, Allocation::kTrain, {.mode = Mode::kEager, .precision = p}).fused_qkv);
    for (const auto& list : {device_step_kernels(fused, Mode::kCompiled), step_kernels(config, shape, p)})
      for (const auto& r : list)
        if (r.family->name().starts_with("rope")) {
          CHECK(r.problem.dim("tokens") == n);
          CHECK(r.problem.dim("heads") == 2 * config.heads);
        }
  }
  // f32: materialised
  CHECK_FALSE(device_layout(config, shape, Allocation::kTrain, {.mode = Mode::kCompiled}).fused_qkv);

  config.d_model = 60;  // k padded away from q: one launch each
  config.heads = 3;
  CHECK_FALSE(device_layout(config, shape, Allocation::kTrain, {.mode = Mode::kCompiled}).paired_rope);
  CHECK(rope_tokens(step_kernels(config, shape, Precision::kF32), "rope_fwd") == n);
}

}  // namespace model_step_kernels_test
