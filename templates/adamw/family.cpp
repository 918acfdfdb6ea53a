// The three AdamW families: spaces, constraints, rendering, launch plans,
// workloads with their CPU reference, FLOP/byte counts.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "base/error.hpp"
#include "templates/adamw/adamw.hpp"
#include "templates/common/family_helpers.hpp"
#include "templates/render.hpp"

namespace ktune::templates::adamw {
namespace {

constexpr const char* kTemplate = "adamw/adamw.cuh";
// Elements per thread of the eager ops: 16 bytes of fp32 (kt::map over fp32 in adamw.cuh).
constexpr std::int64_t kEwWidth = 4;

/// Host mirror of adamw::Hyper in adamw.cuh (seven floats).
struct HyperArgs {
  float lr, beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2_sqrt;
};
static_assert(sizeof(HyperArgs) == 7 * sizeof(float), "must match adamw::Hyper in adamw.cuh");

HyperArgs hyper_args(const AdamwHyper& h) {
  const double t = static_cast<double>(h.step);
  return {h.lr,
          h.beta1,
          h.beta2,
          h.eps,
          h.weight_decay,
          static_cast<float>(1.0 - std::pow(static_cast<double>(h.beta1), t)),
          static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(h.beta2), t)))};
}

/// What every AdamW family shares: problems, workloads, counts.
class AdamwBase : public AdamwFamily {
 public:
  /// The hyper-parameters and the step (from 1), as torch.optim.AdamW's.
  Scalars scalars(const Problem&) const override {
    const AdamwHyper h = workload_hyper();
    return {{"lr", shortest(h.lr)},
            {"beta1", shortest(h.beta1)},
            {"beta2", shortest(h.beta2)},
            {"eps", shortest(h.eps)},
            {"weight_decay", shortest(h.weight_decay)},
            {"step", static_cast<double>(h.step)}};
  }
  void set_scalars(Args& args, const Problem&, const Scalars& s) const override {
    // torch.optim.AdamW's checks, and a step whose bias corrections are not zero.
    for (const char* key : {"lr", "eps", "weight_decay"})
      KTUNE_REQUIRE(s.at(key) >= 0, fmt::format("{}: {} must be >= 0, got {:g}", name(), key, s.at(key)));
    for (const char* key : {"beta1", "beta2"})
      KTUNE_REQUIRE(s.at(key) >= 0 && static_cast<float>(s.at(key)) < 1.0f,  // below 1 as the kernel's f32
                    fmt::format("{}: {} must be in [0, 1), got {:.9g}", name(), key, s.at(key)));
    const double step = s.at("step");
    KTUNE_REQUIRE(step >= 1 && step <= 0x1p53 && step == std::floor(step),
                  fmt::format("{}: step must be a whole number from 1 (the first step), got {:g}", name(), step));
    AdamwHyper& h = args.hyper;
    h.lr = f32_scalar(name(), "lr", s.at("lr"));
    h.beta1 = static_cast<float>(s.at("beta1"));
    h.beta2 = static_cast<float>(s.at("beta2"));
    h.eps = f32_scalar(name(), "eps", s.at("eps"));
    h.weight_decay = f32_scalar(name(), "weight_decay", s.at("weight_decay"));
    h.step = static_cast<std::int64_t>(step);
  }
  std::vector<std::string> source_files() const override { return {kTemplate}; }

  std::vector<Problem> problem_classes() const override {
    // Odd sizes exercise the scalar tails and chunk boundaries.
    return {Problem{"f32", {{"tensors", 3}, {"numel", 4999}}}, Problem{"bf16", {{"tensors", 3}, {"numel", 4999}}}};
  }

  void check_problem(const Problem& p) const override {
    KTUNE_REQUIRE(p.dtype == "f32" || p.dtype == "bf16",
                  name() + ": dtype '" + p.dtype + "' is not supported; accepted: f32 (fp32 params), bf16 (fp32 "
                  "master weights with a bf16 copy)");
    for (const auto& [k, v] : p.dims)
      KTUNE_REQUIRE(k == "tensors" || k == "numel",
                    name() + ": unknown dimension '" + k + "'; accepted: tensors, numel");
    KTUNE_REQUIRE(p.dims.count("tensors") && p.dim("tensors") >= 1 && p.dim("tensors") <= 4096,
                  name() + ": dimension 'tensors' must be in 1..4096");
    KTUNE_REQUIRE(p.dims.count("numel") && p.dim("numel") >= 1 && p.dim("numel") <= (1LL << 31) - 1,
                  name() + ": dimension 'numel' must be in 1..2^31-1");
  }

  std::vector<BufferShape> buffer_shapes(const Problem& p) const override {
    check_problem(p);
    const std::int64_t n = p.dim("numel");
    std::vector<BufferShape> b;
    for (std::int64_t t = 0; t < p.dim("tensors"); ++t) {
      const std::string suffix = "[" + std::to_string(t) + "]";
      b.push_back(buffer_shape("param" + suffix, Role::kInOut, DType::kF32, n));
      b.push_back(buffer_shape("grad" + suffix, Role::kInput, DType::kF32, n));
      b.push_back(buffer_shape("exp_avg" + suffix, Role::kInOut, DType::kF32, n));
      b.push_back(buffer_shape("exp_avg_sq" + suffix, Role::kInOut, DType::kF32, n));
      if (p.dtype == "bf16") b.push_back(buffer_shape("param_bf16" + suffix, Role::kOutput, DType::kBF16, n));
    }
    if (needs_scratch()) b.push_back(buffer_shape("scratch", Role::kScratch, DType::kF32, n));
    return b;
  }

  Workload make_workload(const Problem& p, std::uint64_t seed) const override { return make_workload(p, seed, {}); }
  Workload make_workload(const Problem& p, std::uint64_t seed, const Scalars& given) const override {
    check_problem(p);
    const auto tensors = p.dim("tensors");
    const auto n = static_cast<std::size_t>(p.dim("numel"));
    const bool bf16 = p.dtype == "bf16";
    const AdamwHyper h = args_with_scalars(p, given).hyper;
    std::mt19937_64 rng(seed);
    Workload w;
    for (std::int64_t t = 0; t < tensors; ++t) {
      auto param = random_floats(rng, n, -1.f, 1.f);
      auto grad = random_floats(rng, n, -1.f, 1.f);
      auto m = random_floats(rng, n, -0.1f, 0.1f);
      auto v = random_floats(rng, n, 0.f, 0.01f);
      const std::string suffix = "[" + std::to_string(t) + "]";
      auto bp = make_buffer("param" + suffix, Role::kInOut, DType::kF32, param);
      auto bg = make_buffer("grad" + suffix, Role::kInput, DType::kF32, grad);
      auto bm = make_buffer("exp_avg" + suffix, Role::kInOut, DType::kF32, m);
      auto bv = make_buffer("exp_avg_sq" + suffix, Role::kInOut, DType::kF32, v);
      adamw_step_reference(param.data(), grad.data(), m.data(), v.data(), n, h);
      set_expected(bp, param);
      set_expected(bm, m);
      set_expected(bv, v);
      w.buffers.push_back(std::move(bp));
      w.buffers.push_back(std::move(bg));
      w.buffers.push_back(std::move(bm));
      w.buffers.push_back(std::move(bv));
      if (bf16) {
        std::vector<std::uint16_t> copy(n);
        std::transform(param.begin(), param.end(), copy.begin(), float_to_bf16_bits);
        auto b16 = make_buffer("param_bf16" + suffix, Role::kOutput, DType::kBF16, std::vector<std::uint16_t>(n));
        set_expected(b16, copy);
        b16.tolerance = tolerance_for("bf16");
        w.buffers.push_back(std::move(b16));
      }
    }
    if (needs_scratch())
      w.buffers.push_back(make_buffer("scratch", Role::kScratch, DType::kF32, std::vector<float>(n)));
    return w;
  }

  /// The workload's buffers: per tensor param, grad, exp_avg, exp_avg_sq
  /// (and param_bf16 for bf16), then the eager family's scratch.
  Args args_of(const Problem& p, const std::vector<std::uint64_t>& addresses) const override {
    check_problem(p);
    const bool bf16 = p.dtype == "bf16";
    const std::size_t per = bf16 ? 5 : 4;
    const std::size_t count = static_cast<std::size_t>(p.dim("tensors")) * per + (needs_scratch() ? 1 : 0);
    KTUNE_REQUIRE(addresses.size() == count,
                  fmt::format("{}: {} buffer addresses given, the workload has {} (param, grad, exp_avg, "
                              "exp_avg_sq{} for each of {} tensors{})",
                              name(), addresses.size(), count, bf16 ? ", param_bf16" : "", p.dim("tensors"),
                              needs_scratch() ? ", then scratch" : ""));
    Args args;
    for (std::int64_t t = 0; t < p.dim("tensors"); ++t) {
      const std::size_t b = static_cast<std::size_t>(t) * per;
      args.tensors.push_back({addresses[b], addresses[b + 1], addresses[b + 2], addresses[b + 3],
                              bf16 ? addresses[b + 4] : 0, p.dim("numel")});
    }
    args.hyper = workload_hyper();
    args.workspace = needs_scratch() ? addresses.back() : 0;
    return args;
  }

  std::vector<Launch> plan(const Config& config, const Problem& p, const Args& args,
                           const DeviceLimits& device) const override {
    check_problem(p);
    return plan_tensors(config, p.dtype == "bf16", args.tensors, args.workspace, args.hyper, device, args.clip);
  }

  double flops(const Problem& p) const override {
    return 16.0 * static_cast<double>(p.dim("tensors")) * static_cast<double>(p.dim("numel"));
  }
  double bytes(const Problem& p) const override {
    // Reads param, grad, m, v; writes param, m, v (+ the bf16 copy).
    const double per_element = 7 * 4 + (p.dtype == "bf16" ? 2 : 0);
    return per_element * static_cast<double>(p.dim("tensors")) * static_cast<double>(p.dim("numel"));
  }

  bool is_valid(const Config& c, const Problem& p, const DeviceLimits& d, std::string* why) const override {
    if (c.at("threads") > d.max_threads_per_block) return reject(why, "threads exceed the device's block limit");
    return is_valid_more(c, p, d, why);
  }

 protected:
  /// The constraints of a family's own parameters.
  virtual bool is_valid_more(const Config&, const Problem&, const DeviceLimits&, std::string*) const { return true; }
  virtual bool needs_scratch() const { return false; }
  static std::string bool_arg(bool b) { return b ? "true" : "false"; }
};

// ---- adamw: fused multi-tensor ------------------------------------------------

class MultiTensor final : public AdamwBase {
 public:
  MultiTensor()
      : space_({{"threads", {128, 256, 512, 1024}, "threads per block: more hides latency, fewer frees registers"},
                {"vec", {1, 2, 4}, "floats per thread per step: wider loads, fewer instructions"},
                {"chunk", {2048, 8192, 32768, 65536, 131072},
                 "elements per work item: small balances short tensors, large cuts scheduling overhead"},
                {"tensors_per_launch", {16, 32, 64}, "tensors per launch: fewer launches vs a larger parameter block"},
                {"blocks_per_sm", {1, 2, 4, 8, 16}, "persistent grid size per SM: occupancy vs tail imbalance"}}) {}

  std::string name() const override { return "adamw"; }
  std::string summary() const override {
    return "AdamW step, fused over many tensors per launch (multi-tensor apply, chunked)";
  }
  const Space& space() const override { return space_; }

  Config default_config(const Problem&) const override {
    // PyTorch's _fused_adam: 512 threads, 65536-element chunks, 4-wide.
    return Config({{"threads", 512}, {"vec", 4}, {"chunk", 65536}, {"tensors_per_launch", 64}, {"blocks_per_sm", 4}});
  }

  Rendered render(const Config& c, const Problem& p) const override {
    const std::string kernel =
        fmt::format("adamw::adamw_multi_tensor<{}, {}, {}, {}>", c.at("threads"), c.at("vec"),
                    c.at("tensors_per_launch"), bool_arg(p.dtype == "bf16"));
    return render_template(kTemplate, {kernel}, name());
  }

  std::vector<Launch> plan_tensors(const Config& c, bool bf16_copy, const std::vector<TensorAddresses>& tensors,
                                   std::uint64_t, const AdamwHyper& hyper, const DeviceLimits& device,
                                   const Clip& clip) const override {
    const auto max_tensors = static_cast<std::size_t>(c.at("tensors_per_launch"));
    const std::int64_t chunk = c.at("chunk");
    const HyperArgs h = hyper_args(hyper);
    std::vector<Launch> launches;
    for (std::size_t first = 0; first < tensors.size(); first += max_tensors) {
      const std::size_t count = std::min(max_tensors, tensors.size() - first);
      // Layout of adamw::TensorList<MAX_TENSORS>: five pointer arrays, numel,
      // chunk_begin[MAX_TENSORS + 1], count.
      const std::size_t T = max_tensors;
      std::vector<std::uint64_t> words(6 * T, 0);
      std::vector<std::int32_t> chunk_begin(T + 2, 0);
      std::int64_t chunks = 0;
      for (std::size_t i = 0; i < count; ++i) {
        const auto& t = tensors[first + i];
        KTUNE_REQUIRE(!bf16_copy || t.param_bf16, "adamw: bf16 copy requested but tensor has no bf16 buffer");
        words[0 * T + i] = t.param;
        words[1 * T + i] = t.grad;
        words[2 * T + i] = t.exp_avg;
        words[3 * T + i] = t.exp_avg_sq;
        words[4 * T + i] = t.param_bf16;
        words[5 * T + i] = static_cast<std::uint64_t>(t.numel);
        chunk_begin[i] = static_cast<std::int32_t>(chunks);
        chunks += (t.numel + chunk - 1) / chunk;
        KTUNE_REQUIRE(chunks < (1LL << 31), "adamw: too many chunks in one launch; raise `chunk`");
      }
      for (std::size_t i = count; i <= T; ++i) chunk_begin[i] = static_cast<std::int32_t>(chunks);
      chunk_begin[T + 1] = static_cast<std::int32_t>(count);  // the `count` member follows the array
      std::vector<std::byte> blob(words.size() * 8 + chunk_begin.size() * 4);
      std::memcpy(blob.data(), words.data(), words.size() * 8);
      std::memcpy(blob.data() + words.size() * 8, chunk_begin.data(), chunk_begin.size() * 4);
      blob.resize((blob.size() + 7) / 8 * 8);  // sizeof rounds up to the 8-byte alignment
      if (chunks == 0) continue;
      Launch l;
      l.kernel = 0;
      l.grid = {grid_stride_blocks(chunks, c.at("blocks_per_sm"), device), 1, 1};
      l.block = {static_cast<unsigned>(c.at("threads")), 1, 1};
      l.args.add_bytes(blob.data(), blob.size(), 8).add(chunk).add(h).add(clip.norm).add(clip.max_norm);
      launches.push_back(std::move(l));
    }
    return launches;
  }

 protected:
  bool is_valid_more(const Config& c, const Problem&, const DeviceLimits& d, std::string* why) const override {
    if (c.at("chunk") % c.at("vec") != 0)
      return reject(why, "a chunk must hold whole vectors, so chunk starts keep the tensor's alignment");
    if (c.at("chunk") < c.at("threads") * c.at("vec"))
      return reject(why, "a chunk smaller than one block-wide step leaves threads idle");
    if (c.at("blocks_per_sm") * c.at("threads") > 4 * d.max_threads_per_sm)
      return reject(why, "grid larger than four waves of resident threads only adds scheduling");
    return true;
  }

 private:
  Space space_;
};

// ---- adamw_single: one fused launch per tensor --------------------------------

class SingleTensor final : public AdamwBase {
 public:
  SingleTensor()
      : space_({{"threads", {128, 256, 512, 1024}, "threads per block: more hides latency, fewer frees registers"},
                {"vec", {1, 2, 4}, "floats per thread: wider loads, fewer instructions"}}) {}

  std::string name() const override { return "adamw_single"; }
  std::string summary() const override { return "AdamW step, one fused launch per tensor"; }
  const Space& space() const override { return space_; }
  Config default_config(const Problem&) const override { return Config({{"threads", 256}, {"vec", 4}}); }

  Rendered render(const Config& c, const Problem& p) const override {
    const std::string kernel = fmt::format("adamw::adamw_single_tensor<{}, {}, {}>", c.at("threads"), c.at("vec"),
                                           bool_arg(p.dtype == "bf16"));
    return render_template(kTemplate, {kernel}, name());
  }

  std::vector<Launch> plan_tensors(const Config& c, bool, const std::vector<TensorAddresses>& tensors, std::uint64_t,
                                   const AdamwHyper& hyper, const DeviceLimits&, const Clip& clip) const override {
    const HyperArgs h = hyper_args(hyper);
    std::vector<Launch> launches;
    for (const auto& t : tensors) {
      Launch l;
      l.grid = {static_cast<unsigned>(ceil_div(t.numel, c.at("threads") * c.at("vec"))), 1, 1};
      l.block = {static_cast<unsigned>(c.at("threads")), 1, 1};
      l.args.add(t.param).add(t.grad).add(t.exp_avg).add(t.exp_avg_sq).add(t.param_bf16).add(t.numel).add(h);
      l.args.add(clip.norm).add(clip.max_norm);
      launches.push_back(std::move(l));
    }
    return launches;
  }

 private:
  Space space_;
};

// ---- adamw_eager: PyTorch eager's _single_tensor_adam, op by op ---------------

class Eager final : public AdamwBase {
 public:
  Eager() : space_({{"threads", {128, 256, 512, 1024}, "threads per block of every primitive op"}}) {}

  std::string name() const override { return "adamw_eager"; }
  /// sqrt(v) / bias correction + eps of the tensor being updated.
  std::size_t workspace_bytes(const Config&, const Problem& p) const override {
    return static_cast<std::size_t>(p.dim("numel")) * sizeof(float);
  }
  std::string summary() const override {
    return "AdamW step, one launch per primitive op per tensor (PyTorch eager's _single_tensor_adam)";
  }
  const Space& space() const override { return space_; }
  Config default_config(const Problem&) const override { return Config({{"threads", 256}}); }

  Rendered render(const Config& c, const Problem&) const override {
    std::vector<std::string> kernels;
    for (const char* op : kOps) kernels.push_back(fmt::format("adamw::{}<{}>", op, c.at("threads")));
    return render_template(kTemplate, kernels, name());
  }

  std::vector<Launch> plan_tensors(const Config& c, bool bf16_copy, const std::vector<TensorAddresses>& tensors,
                                   std::uint64_t scratch, const AdamwHyper& hyper, const DeviceLimits&,
                                   const Clip& clip) const override {
    KTUNE_REQUIRE(scratch != 0, "adamw_eager needs a scratch buffer of max(numel) floats");
    KTUNE_REQUIRE(clip.norm == 0, "adamw_eager does not clip: eager clips with grad_norm's own launch (Args::clip "
                                  "is for adamw and adamw_single)");
    const HyperArgs h = hyper_args(hyper);
    const auto threads = static_cast<unsigned>(c.at("threads"));
    std::vector<Launch> launches;
    for (const auto& t : tensors) {
      auto launch = [&](Op op) -> ArgPack& {
        Launch l;
        l.kernel = static_cast<int>(op);
        l.grid = {static_cast<unsigned>(ceil_div(t.numel, threads * kEwWidth)), 1, 1};
        l.block = {threads, 1, 1};
        launches.push_back(std::move(l));
        return launches.back().args;
      };
      launch(kScale).add(t.param).add(1.0f - h.lr * h.weight_decay).add(t.numel);
      launch(kLerp).add(t.exp_avg).add(t.grad).add(1.0f - h.beta1).add(t.numel);
      launch(kScale).add(t.exp_avg_sq).add(h.beta2).add(t.numel);
      launch(kAddcmul).add(t.exp_avg_sq).add(t.grad).add(t.grad).add(1.0f - h.beta2).add(t.numel);
      launch(kSqrt).add(scratch).add(t.exp_avg_sq).add(t.numel);
      launch(kDivScalar).add(scratch).add(h.bias_correction2_sqrt).add(t.numel);
      launch(kAddScalar).add(scratch).add(h.eps).add(t.numel);
      launch(kAddcdiv).add(t.param).add(t.exp_avg).add(scratch).add(-h.lr / h.bias_correction1).add(t.numel);
      if (bf16_copy) launch(kCast).add(t.param_bf16).add(t.param).add(t.numel);
    }
    return launches;
  }

 protected:
  bool needs_scratch() const override { return true; }

 private:
  enum Op { kScale, kLerp, kAddcmul, kSqrt, kDivScalar, kAddScalar, kAddcdiv, kCast };
  static constexpr const char* kOps[] = {"ew_scale",      "ew_lerp",       "ew_addcmul", "ew_sqrt",
                                         "ew_div_scalar", "ew_add_scalar", "ew_addcdiv", "ew_cast_bf16"};
  Space space_;
};

}  // namespace

AdamwHyper AdamwFamily::workload_hyper() {
  AdamwHyper h;
  h.lr = 1e-2f;
  h.weight_decay = 0.1f;
  h.step = 3;
  return h;
}

const AdamwFamily& multi_tensor_family() {
  static const MultiTensor f;
  return f;
}
const AdamwFamily& single_tensor_family() {
  static const SingleTensor f;
  return f;
}
const AdamwFamily& eager_family() {
  static const Eager f;
  return f;
}

}  // namespace ktune::templates::adamw
