// The backends behind model::Runtime (see runtime.hpp).
#include "model/runtime.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "base/error.hpp"
#include "base/host_memory.hpp"
#include "cache/store.hpp"
#include "model/bench_e2e.hpp"
#include "model/device_model.hpp"
#include "model/memory_plan.hpp"
#include "model/nvtx.hpp"
#include "model/ops/device_ops.hpp"

namespace ktune::model {

void check_backend_name(const std::string& backend) {
  KTUNE_REQUIRE(backend == "cpu" || backend == "cuda" || backend == "emu",
                fmt::format("backend '{}'; accepted: cpu, cuda, emu", backend));
}

std::string Runtime::GraphNodes::str(bool forward_only) const {
  if (forward == 0) return "no graph captured: no pass ran twice";
  if (forward_only || backward == 0)
    return fmt::format("the forward a graph of {} nodes{}", forward,
                       forward_only ? "" : ", the backward not captured: it ran once");
  return fmt::format("graphs of {} (forward) and {} (backward) nodes", forward, backward);
}

MemoryPlan plan_run(const ModelConfig& config, const RunShape& shape, const BackendOptions& options) {
  const bool compiled = options.backend != "cpu" && options.mode == Mode::kCompiled;
  MemoryPlan plan = plan_memory(config, shape, plan_threads(options.backend, options.threads), 4,
                                attention_saved(options.precision, compiled), options.precision);
  if (options.backend == "cpu") return plan;
  // A device backend's ops' scratch, as DeviceOps sizes it, its kernels at their family defaults.
  const DeviceOptions device{.mode = options.mode, .precision = options.precision};
  const auto scratch = [&](Allocation allocation) {
    return static_cast<std::int64_t>(planned_scratch_bytes(device_layout(config, shape, allocation, device),
                                                           options.mode, options.deterministic));
  };
  plan.forward_scratch = scratch(Allocation::kForwardOnly);
  plan.scratch = scratch(Allocation::kGradients);
  plan.step_scratch = scratch(Allocation::kTrain);
  return plan;
}

namespace {
// What a run's plan may take of a GPU's free memory: all but cuBLASLt's workspace (at least a byte, so that
// a GPU with less free says nothing fits rather than that its memory is unknown).
std::int64_t plan_bytes_free(std::size_t free_bytes) {
  return std::max<std::int64_t>(static_cast<std::int64_t>(free_bytes) - std::int64_t{kCublasLtWorkspaceBytes}, 1);
}
}  // namespace

std::int64_t available_memory(const BackendOptions& options) {
  if (options.backend == "cuda") return plan_bytes_free(tuner::exec::make_cuda_backend()->memory().free_bytes);
  return available_host_memory();
}

Recompute least_recompute(const ModelConfig& config, RunShape shape, const BackendOptions& options,
                          std::int64_t available, Allocation allocation) {
  return least_recompute(
      [&](Recompute level) {
        shape.recompute = level;
        return plan_run(config, shape, options);
      },
      available, allocation);
}

namespace {

class CpuRuntime final : public Runtime {
 public:
  CpuRuntime(const ModelConfig& config, const RunShape& shape, Allocation allocation, unsigned threads)
      : model_(config, shape, allocation, threads) {}

  double forward(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets) override {
    return model_.forward(tokens, targets);
  }
  std::vector<float> logits(std::int64_t row) override { return model_.logits(row); }
  std::vector<float> token_losses() override { return model_.token_losses(); }
  void backward(bool accumulate) override { model_.backward(accumulate); }
  void step(const templates::adamw::AdamwHyper& hyper) override { model_.step(hyper); }
  void synchronize() override {}
  std::vector<float> parameters() override { return {model_.parameters().begin(), model_.parameters().end()}; }
  void set_parameters(std::span<const float> values) override {
    KTUNE_REQUIRE(values.size() == model_.parameters().size(), "parameter count mismatch");
    std::copy(values.begin(), values.end(), model_.parameters().begin());
  }
  std::vector<float> gradients() override { return {model_.gradients().begin(), model_.gradients().end()}; }
  OptimizerState optimizer_state() override { return model_.optimizer_state(); }
  void set_optimizer_state(const OptimizerState& state) override { model_.set_optimizer_state(state); }
  std::optional<double> grad_norm() override { return model_.grad_norm(); }
  const ModelConfig& config() const override { return model_.config(); }
  const ParameterLayout& layout() const override { return model_.layout(); }
  std::int64_t allocated_bytes() const override { return model_.allocated_bytes(); }
  std::string device() const override { return fmt::format("{} ({} threads)", cpu_name(), model_.threads()); }
  std::string kernel_summary() const override { return ""; }
  std::vector<std::string> warnings() const override { return {}; }
  std::optional<LaunchCount> launches() const override { return std::nullopt; }
  void set_profile(OpProfile* profile) override { model_.set_profile(profile); }

 private:
  Transformer<float> model_;
};

// The most kernels of a kind (nearest, default) the summary names.
constexpr std::size_t kNamedKernels = 4;

class DeviceRuntime final : public Runtime {
 public:
  DeviceRuntime(const ModelConfig& config, const RunShape& shape, Allocation allocation,
                const BackendOptions& options)
      : backend_(options.backend == "cuda" ? tuner::exec::make_cuda_backend()
                                           : tuner::exec::make_emu_backend({.workers = options.emu_workers})),
        baseline_(backend_->memory()),
        allocation_(allocation) {
    backend_->set_programmatic(options.programmatic);
    if (baseline_.total_bytes > 0) {  // a GPU: the plan's peak must fit in what is free, checked before allocating
      const MemoryPlan plan = plan_run(config, shape, options);
      const std::int64_t peak = plan.peak(allocation);
      const std::int64_t free = plan_bytes_free(baseline_.free_bytes);
      KTUNE_REQUIRE(peak <= free,
                    fmt::format("model {} at context {}, batch {} needs {} of device memory (the plan's peak); "
                                "{} has {} free of {}, {} of it kept for cuBLASLt's workspace; {}",
                                config.name, shape.context, shape.batch, format_bytes(peak), backend_->device().name,
                                format_bytes(static_cast<std::int64_t>(baseline_.free_bytes)),
                                format_bytes(static_cast<std::int64_t>(baseline_.total_bytes)),
                                format_bytes(std::int64_t{kCublasLtWorkspaceBytes}), memory_remedy(plan, peak, free)));
    }
    // A cache not there yet is an empty one, which compiled mode's GEMM choices start.
    std::error_code ec;
    if (!options.cache.empty())
      tuned_ = std::make_unique<cache::TunedCache>(std::filesystem::exists(options.cache, ec)
                                                       ? cache::TunedCache::read(options.cache)
                                                       : cache::TunedCache({}, options.cache));
    DeviceOptions device;
    device.mode = options.mode;
    device.precision = options.precision;
    device.tuned = tuned_.get();
    device.graphs = options.graphs;
    device.deterministic = options.deterministic;
    // Compiled mode's GEMM algorithms, timed on this GPU, join the given cache.
    if (!options.cache.empty())
      device.gemm_store = [path = options.cache](const cache::Entry& e) { cache::CacheFile(path).put(e); };
    model_ = std::make_unique<DeviceTransformer>(*backend_, config, shape, allocation, device);
  }

  double forward(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets) override {
    return model_->forward(tokens, targets);
  }
  std::vector<float> logits(std::int64_t row) override { return model_->logits(row); }
  std::vector<float> token_losses() override { return model_->token_losses(); }
  void backward(bool accumulate) override { model_->backward(accumulate); }
  void step(const templates::adamw::AdamwHyper& hyper) override { model_->step(hyper); }
  void synchronize() override { model_->synchronize(); }
  std::vector<float> parameters() override { return model_->parameters(); }
  void set_parameters(std::span<const float> values) override { model_->set_parameters(values); }
  std::vector<float> gradients() override { return model_->gradients(); }
  OptimizerState optimizer_state() override { return model_->optimizer_state(); }
  void set_optimizer_state(const OptimizerState& state) override { model_->set_optimizer_state(state); }
  std::optional<double> grad_norm() override { return model_->grad_norm(); }
  const ModelConfig& config() const override { return model_->layout().config; }
  const ParameterLayout& layout() const override { return model_->layout().params; }
  std::int64_t allocated_bytes() const override {
    return static_cast<std::int64_t>(model_->ops().allocated_bytes());
  }
  std::string device() const override {
    const auto& d = backend_->device();
    return backend_->name() == "emu" ? fmt::format("emulated {}", d.arch) : fmt::format("{} ({})", d.name, d.arch);
  }
  std::string kernel_summary() const override {
    const auto& k = model_->ops().kernels();
    // Where a cache served some kernels, the few it did not serve exactly are named: what to tune next.
    const bool served = k.count(cache::Match::kExact) + k.count(cache::Match::kNearest) > 0;
    // Configs tuned on another GPU of the architecture (a fleet's cache) are said, with the GPUs.
    std::set<std::string> other_gpus;
    std::size_t elsewhere = 0;
    for (const auto& kernel : k.kernels())
      if (!kernel.chosen.other_gpu.empty()) {
        other_gpus.insert(kernel.chosen.other_gpu);
        ++elsewhere;
      }
    const auto count = [&](cache::Match match, const char* how) {
      std::vector<std::string> said;
      std::set<std::string> names;
      for (const auto& kernel : k.kernels())
        if (kernel.chosen.match == match) names.insert(kernel.family->name());
      const std::size_t n = k.count(match);
      if (served && n > 0 && n <= kNamedKernels) said.push_back(fmt::format("{}", fmt::join(names, ", ")));
      if (match == cache::Match::kNearest && elsewhere > 0)
        said.push_back(fmt::format("{} tuned on {}",
                                   elsewhere < n ? fmt::format("{} of them", elsewhere) : n == 1 ? "it" : "all",
                                   fmt::join(other_gpus, ", ")));
      return said.empty() ? fmt::format("{} {}", n, how) : fmt::format("{} {} ({})", n, how, fmt::join(said, "; "));
    };
    std::string summary = fmt::format(
        "{} mode, {}, {} kernels: {} exact, {}, {}; GEMMs: {}", to_string(model_->ops().mode()),
        to_string(model_->layout().precision), k.kernels().size(), k.count(cache::Match::kExact),
        count(cache::Match::kNearest, "nearest"), count(cache::Match::kNone, "default"),
        model_->ops().gemm_engine().name());
    if (model_->ops().deterministic())
      summary += k.made_deterministic() > 0
                     ? fmt::format("; deterministic: {} kernel{} another config, one that sums in a fixed order{}",
                                   k.made_deterministic(), k.made_deterministic() == 1 ? " takes" : "s take",
                                   k.deterministic_measured() == 0
                                       ? ""
                                       : fmt::format(" ({} the fastest such that tuning measured)",
                                                     k.deterministic_measured()))
                     : "; deterministic";
    if (model_->layout().fused_qkv) summary += "; q, k and v one fused projection";
    if (const auto nodes = graph_nodes(); nodes && nodes->forward == 0 && !model_->forward_ran())
      summary += allocation_ == Allocation::kForwardOnly
                     ? "; the forward captured as a graph on its second run"
                     : "; forward and backward captured as graphs on their second run";
    else if (nodes)
      summary += "; " + nodes->str(allocation_ == Allocation::kForwardOnly);
    if (backend_->programmatic())
      summary += backend_->launches_programmatically()
                     ? "; programmatic dependent launch"
                     : "; programmatic dependent launch asked for (no effect here: it needs sm_90 and a GPU)";
    return summary;
  }
  std::vector<KernelChoice> kernel_choices() const override {
    std::vector<KernelChoice> out;
    for (const auto& k : model_->ops().kernels().kernels())
      out.push_back({k.family->name(), k.problem.key(), k.chosen.config.str(),
                     k.chosen.match == cache::Match::kNone ? "default" : cache::to_string(k.chosen.match),
                     k.chosen.source, k.chosen.other_gpu});
    return out;
  }
  std::optional<GraphNodes> graph_nodes() const override {
    if (!model_->graphs()) return std::nullopt;
    return GraphNodes{model_->forward_graph_nodes(), model_->backward_graph_nodes()};
  }
  std::unique_ptr<tuner::exec::Mark> mark() override { return backend_->mark(); }
  double elapsed_ms(const tuner::exec::Mark& from, const tuner::exec::Mark& to) override {
    return backend_->elapsed_ms(from, to);
  }
  std::string clock() const override { return backend_->clock(); }
  std::optional<std::int64_t> device_bytes_in_use() const override {
    if (baseline_.total_bytes == 0) return std::nullopt;
    return static_cast<std::int64_t>(baseline_.free_bytes) - static_cast<std::int64_t>(backend_->memory().free_bytes);
  }
  std::string driver() const override {
    const int v = backend_->device().driver_version;
    return v > 0 ? std::to_string(v) : "";
  }
  std::vector<std::string> warnings() const override {
    auto w = model_->ops().kernels().warnings();
    for (auto& g : model_->ops().gemm_engine().warnings()) w.push_back(std::move(g));
    return w;
  }
  std::optional<LaunchCount> launches() const override { return model_->ops().launches(); }
  void set_profile(OpProfile* profile) override { model_->set_profile(profile); }

 private:
  std::unique_ptr<tuner::exec::Backend> backend_;
  tuner::exec::MemoryInfo baseline_;  // before the run allocated anything
  Allocation allocation_;
  std::unique_ptr<cache::TunedCache> tuned_;
  std::unique_ptr<DeviceTransformer> model_;
};

}  // namespace

std::unique_ptr<Runtime> make_runtime(const ModelConfig& config, const RunShape& shape, Allocation allocation,
                                      const BackendOptions& options) {
  check_backend_name(options.backend);
  enable_nvtx_ranges(options.nvtx);
  if (options.backend == "cpu") {
    KTUNE_REQUIRE(options.cache.empty(), "--cache feeds the device backends' kernels; the cpu backend has none");
    KTUNE_REQUIRE(!options.graphs, "--graph replays a device backend's launches; the cpu backend launches none");
    KTUNE_REQUIRE(!options.programmatic,
                  "--pdl launches a device backend's kernels (--backend cuda or emu); the cpu backend launches none");
    KTUNE_REQUIRE(options.precision == Precision::kF32,
                  fmt::format("the cpu backend runs f32 only, not {}; --dtype tf32 and bf16 need --backend cuda or emu",
                              to_string(options.precision)));
    return std::make_unique<CpuRuntime>(config, shape, allocation, options.threads);
  }
  return std::make_unique<DeviceRuntime>(config, shape, allocation, options);
}

}  // namespace ktune::model
