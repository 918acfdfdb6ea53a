// The backends behind model::Runtime (see runtime.hpp).
#include "model/runtime.hpp"

#include <fmt/format.h>

#include "base/error.hpp"
#include "model/bench_e2e.hpp"
#include "model/device_model.hpp"
#include "model/optimizer.hpp"

namespace ktune::model {

void check_backend_name(const std::string& backend) {
  KTUNE_REQUIRE(backend == "cpu" || backend == "cuda" || backend == "emu",
                fmt::format("backend '{}'; accepted: cpu, cuda, emu", backend));
}

namespace {

class CpuRuntime final : public Runtime {
 public:
  CpuRuntime(const ModelConfig& config, const RunShape& shape, Allocation allocation, unsigned threads)
      : model_(config, shape, allocation, threads) {}

  double forward(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets) override {
    return model_.forward(tokens, targets);
  }
  void backward() override { model_.backward(); }
  void step(const templates::adamw::AdamwHyper& hyper) override {
    if (!opt_) opt_ = std::make_unique<AdamW>(model_.layout().total, hyper);
    opt_->hyper() = hyper;
    opt_->step(model_.parameters(), model_.gradients(), model_.parallel());
  }
  void synchronize() override {}
  std::vector<float> parameters() override { return {model_.parameters().begin(), model_.parameters().end()}; }
  void set_parameters(std::span<const float> values) override {
    KTUNE_REQUIRE(values.size() == model_.parameters().size(), "parameter count mismatch");
    std::copy(values.begin(), values.end(), model_.parameters().begin());
  }
  std::vector<float> gradients() override { return {model_.gradients().begin(), model_.gradients().end()}; }
  const ModelConfig& config() const override { return model_.config(); }
  const ParameterLayout& layout() const override { return model_.layout(); }
  std::int64_t allocated_bytes() const override {
    return model_.allocated_bytes() + (opt_ ? opt_->state_bytes() : 0);
  }
  std::string device() const override { return fmt::format("{} ({} threads)", cpu_name(), model_.threads()); }
  std::string kernel_summary() const override { return ""; }
  std::vector<std::string> warnings() const override { return {}; }
  std::optional<LaunchCount> launches() const override { return std::nullopt; }

 private:
  Transformer<float> model_;
  std::unique_ptr<AdamW> opt_;
};

class DeviceRuntime final : public Runtime {
 public:
  DeviceRuntime(const ModelConfig& config, const RunShape& shape, Allocation allocation,
                const BackendOptions& options)
      : backend_(options.backend == "cuda" ? tuner::exec::make_cuda_backend() : tuner::exec::make_emu_backend()) {
    if (!options.cache.empty()) tuned_ = std::make_unique<cache::TunedCache>(cache::TunedCache::read(options.cache));
    model_ = std::make_unique<DeviceTransformer>(*backend_, config, shape, allocation,
                                                 DeviceOptions{.mode = options.mode, .tuned = tuned_.get()});
  }

  double forward(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets) override {
    return model_->forward(tokens, targets);
  }
  void backward() override { model_->backward(); }
  void step(const templates::adamw::AdamwHyper& hyper) override { model_->step(hyper); }
  void synchronize() override { model_->synchronize(); }
  std::vector<float> parameters() override { return model_->parameters(); }
  void set_parameters(std::span<const float> values) override { model_->set_parameters(values); }
  std::vector<float> gradients() override { return model_->gradients(); }
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
    return fmt::format("{} mode, {} kernels: {} exact, {} nearest, {} default; GEMMs: {}",
                       to_string(model_->ops().mode()), k.kernels().size(), k.count(cache::Match::kExact),
                       k.count(cache::Match::kNearest), k.count(cache::Match::kNone), model_->ops().gemm_engine().name());
  }
  std::vector<std::string> warnings() const override { return model_->ops().kernels().warnings(); }
  std::optional<LaunchCount> launches() const override { return model_->ops().launches(); }

 private:
  std::unique_ptr<tuner::exec::Backend> backend_;
  std::unique_ptr<cache::TunedCache> tuned_;
  std::unique_ptr<DeviceTransformer> model_;
};

}  // namespace

std::unique_ptr<Runtime> make_runtime(const ModelConfig& config, const RunShape& shape, Allocation allocation,
                                      const BackendOptions& options) {
  check_backend_name(options.backend);
  if (options.backend == "cpu") {
    KTUNE_REQUIRE(options.cache.empty(), "--cache feeds the device backends' kernels; the cpu backend has none");
    return std::make_unique<CpuRuntime>(config, shape, allocation, options.threads);
  }
  return std::make_unique<DeviceRuntime>(config, shape, allocation, options);
}

}  // namespace ktune::model
