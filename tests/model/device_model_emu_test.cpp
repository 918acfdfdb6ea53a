// The device backend's step under the host emulation against the cpu
// backend: the same walk over two op implementations must give the same loss,
// gradients and AdamW update (fp32 to 1e-5; tf32 and bf16 within their
// tolerances below),
// in compiled and in eager mode, where the decomposed ops run as their chains
// of primitive kernels. The emulated run's memory starts poisoned (NaN), so an
// op that reads what no op wrote fails here. What a step launched is counted
// too: its GEMMs are the linear layers' and attention's alone, and in
// compiled mode every residual add runs inside the RMSNorm beside it.
#include "model/device_model.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <random>
#include <set>

#include "model/device_check.hpp"
#include "model/ops/eager_chains.hpp"
#include "model/runtime.hpp"
#include "model/flat_adamw.hpp"
#include "model/odd_model.hpp"
#include "model/transformer.hpp"
#include "templates/eager/eager.hpp"
#include "templates/family.hpp"
#include "templates/render.hpp"
#include "tuner/session/tuned_kernels.hpp"

namespace model_device_model_emu_test {

using namespace ktune;
using namespace ktune::model;
using ktune::test::random_tokens;
using ktune::test::rel_l2;

namespace {

// The bf16 bits of each value, rounded to nearest even.
std::vector<std::uint16_t> bf16_bits(std::span<const float> values) {
  std::vector<std::uint16_t> out(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) out[i] = templates::float_to_bf16_bits(values[i]);
  return out;
}

// Parameters of the CS336 initialisation with the norm gains moved away from
// 1 (their gradients then matter), for both backends.
std::vector<float> start_parameters(const ParameterLayout& layout, std::uint64_t seed) {
  std::vector<float> p(static_cast<std::size_t>(layout.total));
  init_parameters<float>(layout, p.data(), seed);
  std::mt19937_64 rng(seed + 1);
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  for (const auto& t : layout.tensors)
    if (t.shape.size() == 1)
      for (std::int64_t i = 0; i < t.numel; ++i) p[t.offset + i] = u(rng);
  return p;
}

using test::odd_model;

struct Case {
  ModelConfig config;
  RunShape shape;
};

// Relative error of the loss and relative L2 error of each gradient tensor
// against the cpu backend's fp32 step.
//
// fp32: the same math in another order, 1e-5.
// tf32: every GEMM (and flash attention's products) reads its inputs rounded
// to tf32, u = 2^-11, a relative error of RMS u/sqrt(3) = 2.8e-4 per rounded
// operand. A gradient tensor meets a chain of such roundings: dW = dY^T X
// rounds both (2 roundings, 4e-4), and dY carries the errors of every GEMM
// it came through from the loss, back through the blocks, plus the forward's
// (the activations X and the logits' softmax). Independent errors add in
// quadrature: the tiny model's deepest chain (the embedding's gradient,
// through 2 blocks of attention and SwiGLU, about 25 roundings) gives
// sqrt(25) x 2.8e-4 = 1.4e-3; flash attention's dQ/dK alone are checked to
// kTf32BackwardTolerance = 1.5e-3 (templates/attention). Measured
// (emulated): worst tensor 1.3e-3 (tiny, compiled), 1.0e-3 (odd shape),
// 1.1e-3 (tiny, eager); 5e-3 leaves room for the spread of a relative L2
// over a tensor's few hundred to few thousand elements and the cancellation
// in dS = P (dP - D), and still fails a 1% error in the attention backward's
// scale (2e-2). The loss is a mean over tokens of log-sum-exp minus a logit:
// its error averages down (1.0e-5 to 2.6e-5 measured), 1e-4.
constexpr double kTf32LossTolerance = 1e-4;
constexpr double kTf32GradientTolerance = 5e-3;
// bf16 mixed precision: GEMM operands and every activation and activation
// gradient are stored in bf16 (u = 2^-8, a relative error of RMS u/sqrt(3)
// = 2.3e-3 per rounding), with fp32 math inside each op. A gradient tensor
// meets, besides the two roundings of its own dW = dY^T X, those of every
// activation on its paths from the loss: about 4 per sub-layer (norm output,
// projection, attention or SwiGLU output, the residual stream) forward and
// as many backward, some 40 for the tiny model's embedding, sqrt(40) x
// 2.3e-3 = 1.4e-2 when independent. Measured (emulated), worst tensor:
// 1.5e-2 (tiny, compiled), 1.3e-2 (tiny, eager), 1.0e-2 (odd shape, both
// modes). 5e-2 leaves room for the spread of a relative L2 over a tensor and
// for correlated roundings, and still fails a gradient computed from stale
// weights (errors of order 1) or a 10% error in one op. The loss, a mean
// over tokens, averages its errors down: 1.4e-5 to 2.3e-4 measured, 2e-3.
constexpr double kBf16LossTolerance = 2e-3;
constexpr double kBf16GradientTolerance = 5e-2;

// Kernel launches of one op of `family` on `problem`, per family: its
// default kernel's, or its eager chain's steps, planned over placeholder
// addresses.
std::map<std::string, std::int64_t> launches_per_op(const templates::Family& family,
                                                    const templates::Problem& problem, bool chain) {
  const auto device = DeviceLimits::for_arch(kDefaultArch);  // the emulation's
  const auto buffers = family.make_workload(problem, 1).buffers;
  if (!chain) {
    const std::vector<std::uint64_t> addresses(buffers.size(), 0x100000);
    return {{family.name(), static_cast<std::int64_t>(
                                family.plan(family.default_config(problem), problem, addresses, device).size())}};
  }
  std::vector<std::uint64_t> addresses(buffers.size(), 0x100000);
  const auto bound = templates::eager::bind_workload(family.name(), problem, addresses);
  std::map<std::string, std::int64_t> n;
  for (const auto& step : templates::eager::plan(family.name(), problem, bound, 0x200000, device).steps)
    n[step.family->name()] += static_cast<std::int64_t>(step.launches.size());
  return n;
}

std::int64_t sum(const std::map<std::string, std::int64_t>& by_family) {
  std::int64_t n = 0;
  for (const auto& [name, k] : by_family) n += k;
  return n;
}

bool is_primitive(const std::string& family) { return family.rfind("prim_", 0) == 0; }

// GEMM calls of one forward and backward: the linear layers' (7 per block
// forward and 14 backward, the LM head's 1 and 2) and materialised
// attention's (per block and batch row: 2 forward, 4 backward; none with
// flash attention). No residual add is among them: each ran as a GEMM of its
// own (4 per block) until it was fused with the RMSNorm beside it. Batched
// projections make q, k and v one GEMM and W1 and W3 one, forward and for
// the weights' gradients: 3 fewer per block each way.
// With q, k and v one fused projection (StepLayout::fused_qkv), the
// backward's dX of the three is one GEMM, not three.
std::int64_t step_gemms(const ModelConfig& c, const RunShape& s, bool flash, bool batched, bool fused_qkv) {
  return (batched ? 15 : 21) * c.layers + 3 + (flash ? 0 : 6 * s.batch * c.layers) - (fused_qkv ? 2 * c.layers : 0);
}

// Compiled mode's norms: every residual add runs in the RMSNorm beside it,
// forward (ln2; the next block's ln1 or the final norm) and backward (each
// block's two norms add the stream's gradient), so the plain norms are left
// the first block's ln1 and the final norm's backward.
void check_fused_residuals(const LaunchCount& launched, const StepLayout& L) {
  const templates::Problem norm{problem_dtype(L.precision), {{"rows", L.shape.tokens()}, {"dim", L.config.d_model}}};
  const auto per_op = [&](const char* family) {
    return sum(launches_per_op(templates::find_family(family), norm, false));
  };
  const std::int64_t layers = L.config.layers;
  CHECK(launched.by_family.at("rmsnorm_fwd") == per_op("rmsnorm_fwd"));
  CHECK(launched.by_family.at("residual_rmsnorm_fwd") == 2 * layers * per_op("residual_rmsnorm_fwd"));
  CHECK(launched.by_family.at("rmsnorm_bwd") == per_op("rmsnorm_bwd"));
  CHECK(launched.by_family.at("residual_rmsnorm_bwd") == 2 * layers * per_op("residual_rmsnorm_bwd"));
}

// Checks the device step against the cpu's; returns what its forward and
// backward launched.
LaunchCount check_step_matches_cpu(const Case& c, Mode mode, Precision precision = Precision::kF32) {
  auto backend = tuner::exec::make_emu_backend();
  INFO(c.config.name << " ctx " << c.shape.context << " batch " << c.shape.batch << " " << to_string(mode) << " "
                     << to_string(precision));
  const bool tf32 = precision == Precision::kTf32, bf16 = precision == Precision::kBf16;
  const double loss_tolerance = tf32 ? kTf32LossTolerance : bf16 ? kBf16LossTolerance : 1e-5;
  const double gradient_tolerance = tf32 ? kTf32GradientTolerance : bf16 ? kBf16GradientTolerance : 1e-5;
  Transformer<float> cpu(c.config, c.shape, Allocation::kTrain, 2);
  DeviceTransformer emu(*backend, c.config, c.shape, Allocation::kTrain, {.mode = mode, .precision = precision});
  const auto params = start_parameters(cpu.layout(), 11);
  std::copy(params.begin(), params.end(), cpu.parameters().begin());
  emu.set_parameters(params);
  if (bf16) CHECK(emu.weight_copy() == bf16_bits(params));  // what the GEMMs read
  std::vector<std::int32_t> tokens, targets;
  random_tokens(c.shape.tokens(), c.config.vocab, 17, tokens, targets);

  const double want = cpu.forward(tokens, targets);
  const LaunchCount before = emu.ops().launches();
  const double got = emu.forward(tokens, targets);
  CHECK(std::isfinite(got));
  CHECK(got == Approx(want).epsilon(loss_tolerance));

  cpu.backward();
  emu.backward();
  const LaunchCount launched = emu.ops().launches().since(before);
  const bool flash = attention_saved(precision, mode == Mode::kCompiled) == AttentionSaved::kLogSumExp;
  CHECK(launched.gemms == step_gemms(c.config, c.shape, flash, mode == Mode::kCompiled, emu.layout().fused_qkv));
  if (mode == Mode::kCompiled) check_fused_residuals(launched, emu.layout());
  const auto grads = emu.gradients();
  for (const auto& t : cpu.layout().tensors) {
    INFO(t.name);
    CHECK(rel_l2(grads, cpu.gradients(), t.offset, t.numel) <= gradient_tolerance);
  }

  // Flash attention in compiled tf32 and bf16 (and nothing materialised: an op's
  // kernel not in the step's list would have been prepared on demand and
  // show here); materialised attention otherwise.
  std::set<std::string> families;
  for (const auto& k : emu.ops().kernels().kernels()) families.insert(k.family->name());
  CHECK(families.count("attention_fwd") == (flash ? 1 : 0));
  CHECK(families.count("attention_bwd") == (flash ? 1 : 0));
  CHECK(families.count("softmax_fwd") == (flash ? 0 : 1));
  CHECK(families.count("softmax_bwd") == (flash ? 0 : 1));

  // One AdamW step from the same gradients (the cpu's, uploaded).
  templates::adamw::AdamwHyper hyper;
  hyper.lr = 1e-2f;
  ktune::test::FlatAdamW opt(cpu.layout().total, hyper);
  emu.set_gradients(cpu.gradients());
  Parallel parallel(2);
  opt.step(cpu.parameters(), cpu.gradients(), parallel);
  emu.step(hyper);
  const auto stepped = emu.parameters();
  CHECK(rel_l2(stepped, cpu.parameters(), 0, cpu.layout().total) <= 1e-6);
  CHECK(emu.steps_taken() == 1);
  // The update itself, not only the parameters it is small against.
  double num = 0, den = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const double d_emu = stepped[i] - params[i], d_cpu = cpu.parameters()[i] - params[i];
    num += (d_emu - d_cpu) * (d_emu - d_cpu);
    den += d_cpu * d_cpu;
  }
  CHECK(std::sqrt(num / den) <= 1e-4);
  // bf16: the step rewrote the GEMMs' copy, the new master weights rounded.
  if (bf16) CHECK(emu.weight_copy() == bf16_bits(stepped));

  // The scratch holds the largest chain's temporaries (after dS for attention's backward).
  for (const auto& r : device_step_kernels(emu.layout(), mode)) {
    INFO(r.family->name());
    CHECK(emu.ops().scratch_bytes() >= chain_temporaries_bytes(mode, r));
  }
  return launched;
}

}  // namespace

TEST_CASE("emu backend: the tiny model's loss, gradients and AdamW step match the cpu backend",
          "[emu][model][device]") {
  check_step_matches_cpu({model_config("tiny"), RunShape{2, 16}}, Mode::kCompiled);
}

TEST_CASE("emu backend: an odd shape (head_dim 80, 3 heads, context 13) matches the cpu backend",
          "[emu][model][device]") {
  check_step_matches_cpu({odd_model(), RunShape{2, 13}}, Mode::kCompiled);
}

TEST_CASE("emu backend: a shape whose k the layout pads away from q (d_model 60, 13 tokens) matches the cpu "
          "backend, q and k rotated one launch each",
          "[emu][model][device]") {
  ModelConfig c = model_config("tiny");
  c.d_model = 60;
  c.heads = 3;
  const RunShape shape{1, 13};
  REQUIRE_FALSE(device_layout(c, shape, Allocation::kTrain, {.mode = Mode::kCompiled}).paired_rope);
  const LaunchCount launched = check_step_matches_cpu({c, shape}, Mode::kCompiled);
  CHECK(launched.by_family.at("rope_fwd") == 2 * c.layers);
  CHECK(check_step_matches_cpu({model_config("tiny"), shape}, Mode::kCompiled).by_family.at("rope_fwd") ==
        c.layers);  // paired
}

TEST_CASE("emu backend, eager mode: the tiny model matches the cpu backend, each decomposed op run as its chain",
          "[emu][model][device]") {
  const Case c{model_config("tiny"), RunShape{1, 12}};
  const LaunchCount compiled = check_step_matches_cpu(c, Mode::kCompiled);
  const LaunchCount eager = check_step_matches_cpu(c, Mode::kEager);
  INFO("compiled: " << compiled.str() << ", eager: " << eager.str());

  // Eager launches what compiled does, with each decomposed op's kernel
  // replaced by its chain's launches, family by family; compiled mode
  // rotates q and k in one launch, eager (as PyTorch eager) one each.
  std::map<std::string, std::int64_t> want = compiled.by_family;
  std::vector<std::string> chained;
  const StepLayout L = device_layout(c.config, c.shape, Allocation::kTrain, {.mode = Mode::kCompiled});
  REQUIRE(L.paired_rope);
  for (const auto& r : device_step_kernels(L, Mode::kCompiled)) {
    const std::string name = r.family->name();
    if (!runs_as_chain(Mode::kEager, *r.family) || !compiled.by_family.count(name)) continue;
    INFO(name);
    chained.push_back(name);
    const std::int64_t fused = sum(launches_per_op(*r.family, r.problem, false));
    REQUIRE(compiled.by_family.at(name) % fused == 0);
    const std::int64_t ops = compiled.by_family.at(name) / fused;
    want[name] -= ops * fused;
    if (want[name] == 0) want.erase(name);
    const bool pair = name.starts_with("rope");
    templates::Problem eager_problem = r.problem;
    if (pair) eager_problem.dims["tokens"] /= 2;
    for (const auto& [step, n] : launches_per_op(*r.family, eager_problem, true))
      want[step] += (pair ? 2 : 1) * ops * n;
  }
  // rmsnorm (alone and after the residual add), swiglu, cross-entropy,
  // attention's softmax, rope and the embedding, forward and backward
  CHECK(chained.size() == 14);
  for (const auto& [name, n] : want) {
    INFO(name);
    CHECK(eager.by_family.count(name));
    if (eager.by_family.count(name)) CHECK(eager.by_family.at(name) == n);
  }
  for (const auto& [name, n] : eager.by_family) {
    INFO(name);
    CHECK(want.count(name));
  }
  CHECK(eager.kernels == sum(want));
  CHECK(eager.kernels > compiled.kernels);
  CHECK(eager.gemms == compiled.gemms + 6 * c.config.layers);  // compiled mode batches the projections
  for (const auto& [name, n] : compiled.by_family) CHECK_FALSE(is_primitive(name));
  // The fused kernels of the decomposed families do not run: softmax's chain
  // runs the softmax kernel unscaled and unmasked, after the scale and mask.
  for (const char* fused : {"rmsnorm_fwd", "rmsnorm_bwd", "residual_rmsnorm_fwd", "residual_rmsnorm_bwd",
                            "swiglu_fwd", "swiglu_bwd", "cross_entropy_fwd", "cross_entropy_bwd", "rope_fwd",
                            "rope_bwd", "embedding_fwd", "embedding_bwd"}) {
    INFO(fused);
    CHECK_FALSE(eager.by_family.count(fused));
  }
  // Per layer: the causal mask forward and its backward, RoPE's stack on q
  // and k, forward and backward; the embedding's index_select, fill and
  // index_add_ once.
  const std::int64_t layers = c.config.layers;
  CHECK(eager.by_family.at("prim_causal_mask") == 2 * layers);
  CHECK(eager.by_family.at("softmax_fwd") == compiled.by_family.at("softmax_fwd"));
  CHECK(eager.by_family.at("softmax_bwd") == compiled.by_family.at("softmax_bwd"));
  CHECK(eager.by_family.at("prim_strided_copy") == 4 * layers);
  CHECK(eager.by_family.at("prim_gather_rows") == 1);
  CHECK(eager.by_family.at("prim_fill") == 1);
  CHECK(eager.by_family.at("prim_index_add") == 1);
}

TEST_CASE("emu backend, eager mode: an odd shape (head_dim 80, 3 heads, context 13) matches the cpu backend",
          "[emu][model][device]") {
  const LaunchCount eager = check_step_matches_cpu({odd_model(), RunShape{2, 13}}, Mode::kEager);
  CHECK(eager.by_family.at("prim_silu") == 2);  // SwiGLU's chain, forward and backward
  CHECK_FALSE(eager.by_family.count("rmsnorm_fwd"));
  // Attention's softmax (in place in the scores, and in dS), RoPE (in place
  // in q and k) and the embedding as their chains.
  CHECK(eager.by_family.at("prim_causal_mask") == 2);
  CHECK(eager.by_family.at("prim_strided_copy") == 4);
  CHECK(eager.by_family.at("prim_gather_rows") == 1);
  CHECK(eager.by_family.at("prim_index_add") == 1);
  for (const char* fused : {"rope_fwd", "rope_bwd", "embedding_fwd", "embedding_bwd"}) {
    INFO(fused);
    CHECK_FALSE(eager.by_family.count(fused));
  }
}

TEST_CASE("emu backend, eager mode: a second step reuses the chains' plans, launches the same and matches the cpu",
          "[emu][model][device]") {
  auto backend = tuner::exec::make_emu_backend();
  const ModelConfig config = model_config("tiny");
  const RunShape shape{1, 12};
  Transformer<float> cpu(config, shape, Allocation::kTrain, 2);
  DeviceTransformer emu(*backend, config, shape, Allocation::kTrain, {.mode = Mode::kEager});
  const auto params = start_parameters(cpu.layout(), 5);
  std::copy(params.begin(), params.end(), cpu.parameters().begin());
  emu.set_parameters(params);
  CHECK(emu.ops().chain_plans() == 0);

  std::vector<LaunchCount> launched;
  std::size_t plans_after_first = 0;
  for (const std::uint64_t seed : {41, 43}) {  // other tokens each step: a plan holds addresses, not data
    INFO("tokens seed " << seed);
    std::vector<std::int32_t> tokens, targets;
    random_tokens(shape.tokens(), config.vocab, seed, tokens, targets);
    const LaunchCount before = emu.ops().launches();
    const double want = cpu.forward(tokens, targets);
    CHECK(emu.forward(tokens, targets) == Approx(want).epsilon(1e-5));
    cpu.backward();
    emu.backward();
    launched.push_back(emu.ops().launches().since(before));
    const auto grads = emu.gradients();
    for (const auto& t : cpu.layout().tensors) {
      INFO(t.name);
      CHECK(rel_l2(grads, cpu.gradients(), t.offset, t.numel) <= 1e-5);
    }
    if (plans_after_first == 0) plans_after_first = emu.ops().chain_plans();
  }
  // One plan per distinct chained op call (the layers' ops are at other
  // addresses), all built in the first step.
  CHECK(plans_after_first > 12);
  CHECK(emu.ops().chain_plans() == plans_after_first);
  CHECK(launched[1].kernels == launched[0].kernels);
  CHECK(launched[1].gemms == launched[0].gemms);
  CHECK(launched[1].by_family == launched[0].by_family);
}

TEST_CASE("emu backend, compiled tf32: the tiny model runs flash attention and matches the cpu backend",
          "[emu][model][device]") {
  // q, k and v as one fused projection (StepLayout::fused_qkv): its RoPE one
  // launch a layer (q and k of a token as 2H heads), forward and backward.
  const Case c{model_config("tiny"), RunShape{2, 16}};
  REQUIRE(device_layout(c.config, c.shape, Allocation::kTrain,
                        {.mode = Mode::kCompiled, .precision = Precision::kTf32}).fused_qkv);
  const LaunchCount launched = check_step_matches_cpu(c, Mode::kCompiled, Precision::kTf32);
  CHECK(launched.by_family.at("rope_fwd") == c.config.layers);
  CHECK(launched.by_family.at("rope_bwd") == c.config.layers);
}

TEST_CASE("emu backend, compiled tf32: the odd shape (head_dim 80, context 13) matches the cpu backend",
          "[emu][model][device]") {
  // Fused too (flash attention's head dims keep q, k and v back to back): rows of 720, heads of 80.
  const Case c{odd_model(), RunShape{2, 13}};
  REQUIRE(device_layout(c.config, c.shape, Allocation::kTrain,
                        {.mode = Mode::kCompiled, .precision = Precision::kTf32}).fused_qkv);
  check_step_matches_cpu(c, Mode::kCompiled, Precision::kTf32);
}

TEST_CASE("emu backend, eager tf32: tf32 GEMMs with materialised attention match the cpu backend",
          "[emu][model][device]") {
  check_step_matches_cpu({model_config("tiny"), RunShape{1, 12}}, Mode::kEager, Precision::kTf32);
}

TEST_CASE("emu backend: flash attention's run holds no (B, H, S, S) buffers", "[emu][model][device]") {
  auto backend = tuner::exec::make_emu_backend();
  const ModelConfig config = model_config("tiny");
  const RunShape shape{2, 64};
  DeviceTransformer f32(*backend, config, shape, Allocation::kTrain, {.precision = Precision::kF32});
  DeviceTransformer tf32(*backend, config, shape, Allocation::kTrain, {.precision = Precision::kTf32});
  // Every block's probabilities give way to a (B, H, S) lse, and the
  // backward's dS to flash attention's smaller workspace.
  const std::int64_t scores = shape.batch * config.heads * shape.context * shape.context;
  const std::int64_t lse = shape.batch * config.heads * shape.context;
  CHECK(f32.ops().allocated_bytes() > tf32.ops().allocated_bytes() + 4 * config.layers * (scores - lse));

  // Each run holds its memory plan's buffers, in their dtypes (bf16: the
  // activations halved, the weights' bf16 copy added), each region aligned
  // to 256 bytes, and the ops' scratch besides.
  DeviceTransformer bf16(*backend, config, shape, Allocation::kTrain, {.precision = Precision::kBf16});
  for (DeviceTransformer* m : {&f32, &tf32, &bf16}) {
    const StepLayout& L = m->layout();
    INFO(to_string(L.precision));
    // A device backend's plan counts no cpu threads' scratch, whatever --threads says.
    const MemoryPlan plan = plan_memory(config, shape, plan_threads("emu", 2), 4, L.attention, L.precision);
    const auto regions = static_cast<std::int64_t>(m->ops().allocated_bytes() - m->ops().scratch_bytes());
    CHECK(regions >= plan.peak_step() - plan.scratch);
    CHECK(regions <= plan.peak_step() - plan.scratch + (kRegionCount + 1) * 256);
  }
}

TEST_CASE("emu backend: a training run's memory plan counts materialised attention's dS, the ops' scratch",
          "[emu][model][device]") {
  auto backend = tuner::exec::make_emu_backend();
  const ModelConfig config = model_config("tiny");
  const RunShape shape{1, 128};
  const std::int64_t scores = shape.batch * config.heads * shape.context * shape.context;
  for (const auto& [mode, precision] : {std::pair{Mode::kCompiled, Precision::kF32}, {Mode::kEager, Precision::kF32},
                                        {Mode::kEager, Precision::kBf16}}) {
    INFO(to_string(mode) << " " << to_string(precision));
    DeviceTransformer m(*backend, config, shape, Allocation::kTrain, {.mode = mode, .precision = precision});
    REQUIRE(m.layout().attention == AttentionSaved::kProbabilities);
    const MemoryPlan plan = plan_memory(config, shape, plan_threads("emu", 2), 4, m.layout().attention, precision);
    CHECK(plan.scratch == scores * (precision == Precision::kBf16 ? 2 : 4));
    // The run holds at least the plan's peak; in compiled mode exactly (each region 256-byte aligned), where
    // no kernel's workspace outgrows dS. Eager mode's chains may take more (here the RMSNorm backward's).
    const auto allocated = static_cast<std::int64_t>(m.ops().allocated_bytes());
    CHECK(allocated >= plan.peak_step());
    if (mode == Mode::kCompiled) CHECK(allocated <= plan.peak_step() + (kRegionCount + 2) * 256);
  }
  // The fused AdamW takes no temporary: with a vocabulary whose embedding (fp32) outgrows dS, compiled mode still
  // holds its plan.
  ModelConfig wide = config;
  wide.vocab = 10000;
  DeviceTransformer m(*backend, wide, shape, Allocation::kTrain, {.mode = Mode::kCompiled});
  const MemoryPlan plan = plan_memory(wide, shape, plan_threads("emu", 2), 4, m.layout().attention, Precision::kF32);
  REQUIRE(wide.vocab * wide.d_model * 4 > plan.scratch);
  CHECK(static_cast<std::int64_t>(m.ops().allocated_bytes()) <= plan.peak_step() + (kRegionCount + 2) * 256);
}

TEST_CASE("emu backend: a run's plan counts the ops' scratch, eager chains' temporaries and AdamW's included",
          "[emu][model][device]") {
  auto backend = tuner::exec::make_emu_backend();
  ModelConfig config = model_config("tiny");
  config.vocab = 10000;  // the cross-entropy chain's (tokens, vocab) temporaries and the embedding outgrow dS
  const RunShape shape{2, 16};
  for (const Mode mode : {Mode::kEager, Mode::kCompiled})
    for (const Precision precision : {Precision::kF32, Precision::kBf16})
      for (const Allocation allocation : {Allocation::kForwardOnly, Allocation::kGradients, Allocation::kTrain}) {
        INFO(to_string(mode) << " " << to_string(precision) << " allocation " << static_cast<int>(allocation));
        BackendOptions b;
        b.backend = "emu";
        b.mode = mode;
        b.precision = precision;
        const MemoryPlan plan = plan_run(config, shape, b);
        DeviceTransformer m(*backend, config, shape, allocation, {.mode = mode, .precision = precision});
        const auto allocated = static_cast<std::int64_t>(m.ops().allocated_bytes());
        CHECK(allocated >= plan.peak(allocation));
        CHECK(allocated <= plan.peak(allocation) + (kRegionCount + 2) * 256);
      }
}

TEST_CASE("emu backend: a forward-only run holds no backward scratch, in compiled mode its plan's forward peak",
          "[emu][model][device]") {
  auto backend = tuner::exec::make_emu_backend();
  const ModelConfig config = model_config("tiny");
  const RunShape shape{1, 128};
  // Materialised attention's backward keeps dS, (B, H, S, S), in the scratch: a forward (eval, generate) needs
  // none, nor eager AdamW's temporary. Eager mode's cross-entropy keeps two (tokens, vocab) fp32 temporaries,
  // half of dS here.
  const auto scores = static_cast<std::size_t>(shape.batch * config.heads * shape.context * shape.context) * 4;
  for (const Mode mode : {Mode::kCompiled, Mode::kEager}) {
    INFO(to_string(mode));
    DeviceTransformer infer(*backend, config, shape, Allocation::kForwardOnly, {.mode = mode});
    CHECK(infer.ops().scratch_bytes() < scores);
    const MemoryPlan plan = plan_memory(config, shape, plan_threads("emu", 2), 4, infer.layout().attention);
    if (mode == Mode::kCompiled)
      CHECK(static_cast<std::int64_t>(infer.ops().allocated_bytes()) <= plan.peak_forward() + 8 * 1024);
  }
}

TEST_CASE("emu backend: a model built for gradients alone holds no optimizer state: its plan's forward+backward peak, "
          "a training model's gradients", "[emu][model][device]") {
  auto backend = tuner::exec::make_emu_backend();
  const ModelConfig config = model_config("tiny");
  const RunShape shape{1, 64};
  std::vector<std::int32_t> tokens, targets;
  random_tokens(shape.tokens(), config.vocab, 31, tokens, targets);
  for (const Mode mode : {Mode::kCompiled, Mode::kEager}) {
    INFO(to_string(mode));
    DeviceTransformer train(*backend, config, shape, Allocation::kTrain, {.mode = mode});
    DeviceTransformer gradients(*backend, config, shape, Allocation::kGradients, {.mode = mode});
    const MemoryPlan plan = plan_memory(config, shape, plan_threads("emu", 2), 4, gradients.layout().attention);
    const auto allocated = static_cast<std::int64_t>(gradients.ops().allocated_bytes());
    CHECK(allocated >= plan.peak_forward_backward());
    // In compiled mode exactly the plan's peak (each region 256-byte aligned); eager mode's chains may take more.
    if (mode == Mode::kCompiled) {
      CHECK(allocated <= plan.peak_forward_backward() + (kRegionCount + 2) * 256);
      const auto training = static_cast<std::int64_t>(train.ops().allocated_bytes());
      CHECK(training - allocated >= plan.optimizer_state);
      CHECK(training - allocated <= plan.optimizer_state + 2 * 256);
    }
    CHECK(gradients.forward(tokens, targets) == Approx(train.forward(tokens, targets)).epsilon(1e-6));
    gradients.backward();
    train.backward();
    const std::vector<float> got = gradients.gradients(), want = train.gradients();
    CHECK(rel_l2(got, want, 0, gradients.layout().params.total) <= 1e-6);
    CHECK_THROWS_AS(gradients.step({}), Error);
    CHECK_THROWS_AS(gradients.optimizer_state(), Error);
  }
}

TEST_CASE("emu backend: compiled mode takes configs from the tuned cache and counts them, eager ignores it",
          "[emu][model][device]") {
  auto backend = tuner::exec::make_emu_backend();
  const ModelConfig config = model_config("tiny");
  const RunShape shape{1, 8};
  const std::int64_t n = shape.tokens() * config.d_ff;
  const auto& gate = templates::find_family("swiglu_fwd");
  const auto& gate_bwd = templates::find_family("swiglu_bwd");
  const templates::Problem step_gate{"f32", {{"n", n}}}, other_gate{"f32", {{"n", 4 * n}}};
  Config tuned = gate.default_config(step_gate);
  tuned.set("threads", tuned.at("threads") == 128 ? 64 : 128);
  REQUIRE(gate.is_valid(tuned, step_gate, backend->device()));
  std::vector<cache::Entry> entries;
  for (const auto& [family, problem] : {std::pair{&gate, step_gate}, std::pair{&gate_bwd, other_gate}}) {
    cache::Entry e;
    e.key = tuner::cache_key(*family, problem, backend->device());
    e.config = tuned.to_json();
    e.time_ms = e.p20_ms = e.p80_ms = 1;
    e.repetitions = 1;
    entries.push_back(e);
  }
  const cache::TunedCache cache(entries);

  std::vector<std::int32_t> tokens, targets;
  random_tokens(shape.tokens(), config.vocab, 29, tokens, targets);
  Transformer<float> cpu(config, shape, Allocation::kForwardOnly, 1);
  const double want = cpu.forward(tokens, targets);

  // A training run's: one without gradients compiles its forward's kernels alone, not swiglu_bwd.
  DeviceTransformer compiled(*backend, config, shape, Allocation::kTrain, {.mode = Mode::kCompiled, .tuned = &cache});
  const auto& k = compiled.ops().kernels();
  CHECK(k.count(cache::Match::kExact) == 1);
  CHECK(k.count(cache::Match::kNearest) == 1);
  CHECK(k.count(cache::Match::kNone) == k.kernels().size() - 2);
  CHECK(k.get(gate, step_gate).chosen.config == tuned);
  CHECK(compiled.forward(tokens, targets) == Approx(want).epsilon(1e-5));

  DeviceTransformer eager(*backend, config, shape, Allocation::kTrain, {.mode = Mode::kEager, .tuned = &cache});
  CHECK(eager.ops().kernels().count(cache::Match::kNone) == eager.ops().kernels().kernels().size());
  CHECK(eager.forward(tokens, targets) == Approx(want).epsilon(1e-5));
}

TEST_CASE("emu backend, compiled bf16: the tiny model runs flash attention in mixed precision and matches the cpu",
          "[emu][model][device]") {
  check_step_matches_cpu({model_config("tiny"), RunShape{2, 16}}, Mode::kCompiled, Precision::kBf16);
}

TEST_CASE("emu backend, compiled bf16: the odd shape (head_dim 80, context 13) matches the cpu backend",
          "[emu][model][device]") {
  check_step_matches_cpu({odd_model(), RunShape{2, 13}}, Mode::kCompiled, Precision::kBf16);
}

TEST_CASE("emu backend, eager bf16: the tiny model's chains in bf16 match the cpu backend", "[emu][model][device]") {
  check_step_matches_cpu({model_config("tiny"), RunShape{1, 12}}, Mode::kEager, Precision::kBf16);
}

TEST_CASE("emu backend, eager bf16: the odd shape (head_dim 80, context 13) matches the cpu backend",
          "[emu][model][device]") {
  check_step_matches_cpu({odd_model(), RunShape{2, 13}}, Mode::kEager, Precision::kBf16);
}

}  // namespace model_device_model_emu_test
