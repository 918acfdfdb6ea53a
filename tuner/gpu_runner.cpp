#include "tuner/gpu_runner.hpp"

#include <fmt/format.h>

#include "search/pruning.hpp"
#include "tuner/check.hpp"
#include "tuner/compiler.hpp"
#include "tuner/device.hpp"
#include "tuner/timing.hpp"

namespace ktune::tuner {
namespace {

std::string first_lines(const std::string& text, int lines) {
  std::string out;
  int n = 0;
  for (char c : text) {
    if (c == '\n' && ++n == lines) break;
    out += c;
  }
  return out;
}

class GpuRunner final : public Runner {
 public:
  explicit GpuRunner(int ordinal) : context_(ordinal), limits_(context_.info().limits()) {}

  std::string backend() const override { return "gpu"; }
  const DeviceLimits& device() const override { return limits_; }

  RunResult run(const Family& family, const Config& config, const Problem& problem,
                const RunOptions& options) override {
    RunResult result;
    const auto rendered = family.render(config, problem);
    const CompileResult compiled = compiler_.compile(rendered, limits_.arch);
    result.compile_ms = compiled.compile_ms;
    if (!compiled.ok) {
      result.failure = "compile: " + first_lines(compiled.log, 8);
      return result;
    }
    try {
      run_compiled(family, config, problem, options, compiled, result);
    } catch (const Error& e) {
      result.ok = false;
      result.failure = std::string(e.kind() == ErrorKind::kCuda ? "launch: " : "run: ") + e.what();
    }
    return result;
  }

 private:
  void run_compiled(const Family& family, const Config& config, const Problem& problem, const RunOptions& options,
                    const CompileResult& compiled, RunResult& result) {
    const Driver& d = Driver::get();
    Module module(compiled.cubin);
    std::vector<CUfunction> functions;
    for (const auto& k : compiled.kernels) functions.push_back(module.function(k.lowered_name));

    const templates::Workload& workload = workload_for(family, problem, options.seed);
    std::vector<DeviceBuffer> buffers;
    std::vector<std::uint64_t> addresses;
    for (const auto& b : workload.buffers) {
      buffers.emplace_back(b.bytes.size());
      addresses.push_back(buffers.back().address());
    }
    auto reset_inputs = [&] {
      for (std::size_t i = 0; i < workload.buffers.size(); ++i) {
        const auto& b = workload.buffers[i];
        if (b.role == templates::Role::kOutput) {  // poison: every byte 0xFF is a NaN in every float type
          KT_CHECK_CU(d.cuMemsetD8Async(static_cast<CUdeviceptr>(addresses[i]), 0xFF, b.bytes.size(), stream_.get()));
        } else {
          buffers[i].upload(b.bytes.data(), b.bytes.size());
        }
      }
      stream_.synchronize();
    };
    std::vector<templates::Launch> plan = family.plan(config, problem, addresses, limits_);
    for (const auto& l : plan) {
      // Static pruning: a kernel that cannot be resident on this device is a
      // result, not a launch error.
      const auto& k = compiled.kernels.at(static_cast<std::size_t>(l.kernel));
      search::ResourceUsage usage;
      usage.registers_per_thread = k.registers;
      usage.spill_bytes = k.spill_bytes();
      usage.static_shared_bytes = k.static_smem_bytes;
      usage.dynamic_shared_bytes = l.dynamic_smem;
      usage.threads_per_block = static_cast<int>(l.block[0] * l.block[1] * l.block[2]);
      const auto verdict = search::prune(usage, limits_);
      if (verdict.verdict == search::Verdict::kPruned) {
        result.failure = "pruned: " + k.name_expression + ": " + verdict.reason;
        return;
      }
    }
    for (const auto& l : plan) {
      if (l.dynamic_smem > 48 * 1024)
        KT_CHECK_CU(d.cuFuncSetAttribute(functions.at(static_cast<std::size_t>(l.kernel)),
                                         CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         static_cast<int>(l.dynamic_smem)));
    }
    auto launch_all = [&](CUstream stream) {
      for (auto& l : plan) {
        auto args = l.args.pointers();
        KT_CHECK_CU(d.cuLaunchKernel(functions.at(static_cast<std::size_t>(l.kernel)), l.grid[0], l.grid[1],
                                     l.grid[2], l.block[0], l.block[1], l.block[2], l.dynamic_smem, stream,
                                     args.data(), nullptr));
      }
    };

    if (options.validate) {
      reset_inputs();
      launch_all(stream_.get());
      stream_.synchronize();
      std::vector<std::vector<std::byte>> results(workload.buffers.size());
      for (std::size_t i = 0; i < workload.buffers.size(); ++i) {
        const auto& b = workload.buffers[i];
        if (b.role != templates::Role::kOutput && b.role != templates::Role::kInOut) continue;
        results[i].resize(b.bytes.size());
        buffers[i].download(results[i].data(), results[i].size());
      }
      check_results(workload, results, result);
      if (!result.ok) return;
    } else {
      reset_inputs();
      result.ok = true;
    }
    if (options.time) {
      result.timing = time_on_gpu(launch_all, options, stream_, limits_.l2_bytes,
                                  fmt::format("{} launch{}", plan.size(), plan.size() == 1 ? "" : "es"));
    }
  }

  /// A tuning session runs one problem many times: its inputs and CPU
  /// reference are made once per (family, problem, seed), not per variant.
  const templates::Workload& workload_for(const Family& family, const Problem& problem, std::uint64_t seed) {
    const std::string key = family.name() + "|" + problem.key() + "|" + std::to_string(seed);
    if (key != workload_key_) {
      workload_key_.clear();
      workload_ = family.make_workload(problem, seed);
      workload_key_ = key;
    }
    return workload_;
  }

  std::string workload_key_;
  templates::Workload workload_;
  Context context_;
  DeviceLimits limits_;
  Stream stream_;
  Compiler compiler_;
};

}  // namespace

std::unique_ptr<Runner> make_gpu_runner(int ordinal) { return std::make_unique<GpuRunner>(ordinal); }

}  // namespace ktune::tuner
