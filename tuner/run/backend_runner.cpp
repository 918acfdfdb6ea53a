// The runner over an execution backend (tuner/exec/backend.hpp): workload,
// poisoning, the fit check, validation against the CPU reference and timing,
// written once for the GPU and the emulation.
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <new>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "base/error.hpp"
#include "base/host_memory.hpp"
#include "tuner/compile/compiler.hpp"
#include "tuner/run/emu_runner.hpp"
#include "tuner/exec/backend.hpp"
#include "tuner/run/gpu_runner.hpp"

namespace ktune::tuner {
namespace {

RunResult failed(std::string failure, double compile_ms = 0) {
  RunResult r;
  r.failure = std::move(failure);
  r.compile_ms = compile_ms;
  return r;
}

/// A compiler log's first error line (else its first line), without NUL bytes.
std::string first_error(const std::string& log) {
  std::istringstream lines(log);
  std::string first, line;
  while (std::getline(lines, line)) {
    std::erase(line, '\0');
    if (line.empty()) continue;
    if (first.empty()) first = line;
    if (line.find("error") != std::string::npos) return line;
  }
  return first.empty() ? "(no log)" : first;
}

/// Whether an integer output's expected answer holds the poison pattern (all bits set) in some element.
bool poison_is_an_answer(const templates::Workload& workload) {
  for (const auto& b : workload.buffers) {
    if (b.role != templates::Role::kOutput || !templates::is_integer(b.dtype)) continue;
    const std::size_t size = templates::size_of(b.dtype);
    for (std::size_t k = 0; k + size <= b.expected.size(); k += size)
      if (std::all_of(b.expected.begin() + static_cast<std::ptrdiff_t>(k),
                      b.expected.begin() + static_cast<std::ptrdiff_t>(k + size),
                      [](std::byte x) { return x == std::byte{0xFF}; }))
        return true;
  }
  return false;
}

/// The failure text of an error raised while running a variant.
std::string failure_of(const Error& e) {
  const std::string what = e.what();
  if (what.rfind("emulation: ", 0) == 0) return what;
  if (what.rfind("does not fit: ", 0) == 0) return "pruned: " + what.substr(14);
  if (e.kind() == ErrorKind::kCuda) return "launch: " + what;
  return "run: " + what;
}

class BackendRunner final : public Runner {
 public:
  explicit BackendRunner(std::unique_ptr<exec::Backend> backend) : backend_(std::move(backend)) {}

  std::string backend() const override { return backend_->name(); }
  const DeviceLimits& device() const override { return backend_->device(); }

  RunResult run(const Family& family, const Config& config, const Problem& problem,
                const RunOptions& options) override {
    family.check_problem(problem);
    std::string why;
    if (!family.is_valid(config, problem, device(), &why)) return failed("invalid: " + why);
    if (backend_->name() == "emu" && !family.runs_emulated(config, problem))
      return failed("invalid: this config runs only on a GPU, not under the emulation");
    const templates::Rendered rendered = family.render(config, problem);
    // Under the emulation, a user's kernel is also compiled as a GPU would
    // take it: what NVRTC refuses, or what does not fit, fails here too.
    std::optional<CompileResult> nvrtc;
    if (backend_->name() == "emu" && family.compiled_with_nvrtc_under_emulation()) {
      nvrtc = Compiler().compile(rendered, device().arch);
      if (!nvrtc->ok)
        return failed(fmt::format("compile: NVRTC for {}, as a GPU would compile it (`ktune compile` prints its whole "
                                  "log): {}",
                                  device().arch, first_error(nvrtc->log)),
                      nvrtc->compile_ms);
    }
    std::shared_ptr<const exec::Module> module;
    try {
      module = backend_->load(rendered);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kCompile) throw;
      return failed(std::string("compile: ") + e.what());
    }
    RunResult result;
    result.compile_ms = module->compile_ms();
    result.not_stored = nvrtc ? nvrtc->not_stored : module->not_stored();
    try {
      run_loaded(family, config, problem, options, *module, nvrtc ? &nvrtc->kernels : nullptr, result);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::kInvalidInput) throw;  // a bad problem or config is the caller's error
      result.ok = false;
      result.failure = failure_of(e);
    }
    return result;
  }

 private:
  // `nvrtc`: the resources NVRTC reported, for a module whose own report has none (the emulation's).
  void run_loaded(const Family& family, const Config& config, const Problem& problem, const RunOptions& options,
                  const exec::Module& module, const std::vector<KernelResources>* nvrtc, RunResult& result) {
    const templates::Workload& workload = workload_for(family, problem, options.seed, options.scalars);
    std::vector<std::unique_ptr<exec::Buffer>> buffers;
    std::vector<std::uint64_t> addresses;
    for (const auto& b : workload.buffers) {
      buffers.push_back(backend_->allocate(b.bytes.size(), b.name));
      addresses.push_back(buffers.back()->address());
    }
    const std::vector<templates::Launch> plan = family.plan(config, problem, addresses, device(), options.scalars);
    // A variant that cannot be resident on this device is a result, not a launch error.
    const exec::FitResult fit =
        exec::check_fit(module.kernel_names(), nvrtc ? *nvrtc : module.resources(), plan, device());
    if (!fit.fits()) {
      result.failure = fmt::format("pruned: {}{}{}", fit.kernel, fit.kernel.empty() ? "" : ": ", fit.verdict.reason);
      return;
    }
    for (std::size_t i = 0; i < workload.buffers.size(); ++i) {
      const auto& b = workload.buffers[i];
      if (b.role == templates::Role::kOutput)
        backend_->poison(*buffers[i]);
      else
        backend_->upload(*buffers[i], b.bytes.data(), b.bytes.size());
    }
    if (options.validate) {
      const auto validate = [&] {
        backend_->launch(module, plan);
        backend_->synchronize();
        std::vector<std::vector<std::byte>> results(workload.buffers.size());
        for (std::size_t i = 0; i < workload.buffers.size(); ++i) {
          const auto& b = workload.buffers[i];
          if (b.role != templates::Role::kOutput && b.role != templates::Role::kInOut) continue;
          results[i].resize(b.bytes.size());
          backend_->download(results[i].data(), *buffers[i], results[i].size());
        }
        check_results(workload, results, result);
      };
      validate();
      if (!result.ok) return;
      // Poison is all bits set: NaN in a float type, an answer in an integer one (-1, 255). Where an integer
      // output's answer holds it somewhere, the variant runs again from zeros (its inputs uploaded again, as an
      // in-place variant changed them), so an element it leaves unwritten there fails the second check.
      if (poison_is_an_answer(workload)) {
        for (std::size_t i = 0; i < workload.buffers.size(); ++i) {
          const auto& b = workload.buffers[i];
          const std::vector<std::byte> bytes =
              b.role == templates::Role::kOutput ? std::vector<std::byte>(b.bytes.size()) : b.bytes;
          backend_->upload(*buffers[i], bytes.data(), bytes.size());
        }
        validate();
        if (!result.ok) return;
      }
    } else {
      result.ok = true;
    }
    if (options.time) {
      // Inputs drawn otherwise for timing: attention's in full at large shapes, where the check's sample left zeros.
      for (std::size_t i = 0; i < workload.buffers.size(); ++i)
        if (const auto& b = workload.buffers[i]; !b.timed.empty())
          backend_->upload(*buffers[i], b.timed.data(), b.timed.size());
      // Constant memory is filled once, before the timed launches, as Kernel Tuner copies its cmem_args: the
      // module keeps what a launch copied, and a buffer copied there is an input, which no launch writes.
      std::vector<templates::Launch> timed = plan;
      bool copies = false;
      for (auto& l : timed) copies |= !std::exchange(l.constants, {}).empty();
      if (copies && !options.validate) {
        backend_->launch(module, plan);
        backend_->synchronize();
      }
      // A family whose in-place results change the next launch's work has its inout buffers restored before
      // each repetition, from copies on the device, outside what is timed.
      std::vector<std::pair<std::size_t, std::unique_ptr<exec::Buffer>>> uploaded;
      if (family.timing_restores_inouts())
        for (std::size_t i = 0; i < workload.buffers.size(); ++i)
          if (const auto& b = workload.buffers[i]; b.role == templates::Role::kInOut) {
            uploaded.emplace_back(i, backend_->allocate(b.bytes.size(), b.name + " as uploaded"));
            backend_->upload(*uploaded.back().second, b.timed_bytes().data(), b.bytes.size());
          }
      std::function<void()> restore;
      if (!uploaded.empty())
        restore = [&] {
          for (const auto& [i, from] : uploaded) backend_->copy(*buffers[i], *from, from->bytes());
        };
      const std::string restored = restore ? " (in-place buffers restored before each, untimed)" : "";
      const std::string what = fmt::format("{} launch{}{}{}", timed.size(), timed.size() == 1 ? "" : "es",
                                           copies ? " (constant memory filled before)" : "", restored);
      result.timing = backend_->time([&] { backend_->launch(module, timed); }, options, what, restore);
      if (options.per_launch && timed.size() > 1)
        for (const auto& l : timed)
          result.launch_timings.emplace_back(
              module.kernel_names()[static_cast<std::size_t>(l.kernel)],
              backend_->time([&] { backend_->launch(module, {l}); }, options, "1 launch alone" + restored, restore));
    }
  }

  /// A tuning session runs one problem many times: its inputs and CPU
  /// reference are made once per (family, problem, seed), not per variant.
  const templates::Workload& workload_for(const Family& family, const Problem& problem, std::uint64_t seed,
                                         const templates::Scalars& scalars) {
    const std::string key =
        family.name() + "|" + problem.key() + "|" + std::to_string(seed) + "|" + nlohmann::json(scalars).dump();
    if (key != workload_key_) {
      workload_key_.clear();
      workload_ = {};  // the last problem's buffers are not held beside the next's
      // Refused before anything is allocated where its buffers alone pass what the host has: with overcommit,
      // an allocation too large succeeds, and the process is killed as it fills it.
      if (const std::int64_t available = available_host_memory();
          available > 0 && held_bytes(family, problem) > static_cast<double>(available))
        throw_error(ErrorKind::kInvalidInput, too_large_to_check(family, problem));
      try {
        workload_ = family.make_workload(problem, seed, scalars);
      } catch (const std::bad_alloc&) {
        throw_error(ErrorKind::kInvalidInput, too_large_to_check(family, problem));
      } catch (const std::length_error&) {  // a vector past max_size(): no host has that much
        throw_error(ErrorKind::kInvalidInput, too_large_to_check(family, problem));
      }
      workload_key_ = key;
    }
    return workload_;
  }

  /// Why a problem the family accepts cannot be checked here: its inputs and the CPU reference's results do not
  /// fit in host memory. The buffers' bytes are a floor (buffer_shapes, or the DRAM traffic where more).
  static double held_bytes(const Family& family, const Problem& problem) {  // the buffers' (buffer_shapes)
    double held = 0;
    for (const auto& b : family.buffer_shapes(problem)) held += static_cast<double>(b.bytes);
    return held;
  }
  static std::string too_large_to_check(const Family& family, const Problem& problem) {
    const double bytes = std::max(family.bytes(problem), held_bytes(family, problem));
    return fmt::format("{} {}: too large to check on this host: its inputs and the CPU reference's results need at "
                       "least {:.0f} bytes ({:.1f} GiB) of host memory, more than it gives; check a smaller problem",
                       family.name(), problem.key(), bytes, bytes / (1024.0 * 1024 * 1024));
  }

  std::unique_ptr<exec::Backend> backend_;
  std::string workload_key_;
  templates::Workload workload_;
};

}  // namespace

std::unique_ptr<Runner> make_backend_runner(std::unique_ptr<exec::Backend> backend) {
  return std::make_unique<BackendRunner>(std::move(backend));
}

std::unique_ptr<Runner> make_gpu_runner(int ordinal) { return make_backend_runner(exec::make_cuda_backend(ordinal)); }

EmuRunner::EmuRunner(EmuOptions options) : inner_(make_backend_runner(exec::make_emu_backend(options))) {}
EmuRunner::~EmuRunner() = default;
std::string EmuRunner::backend() const { return inner_->backend(); }
const DeviceLimits& EmuRunner::device() const { return inner_->device(); }
RunResult EmuRunner::run(const Family& family, const Config& config, const Problem& problem,
                         const RunOptions& options) {
  return inner_->run(family, config, problem, options);
}

std::unique_ptr<Runner> make_emu_runner(EmuOptions options) { return std::make_unique<EmuRunner>(options); }

// Not `emulated ? make_emu_runner(emu) : make_gpu_runner()`: as g++ 12 unwinds a throw from the emulation's
// construction (a bad KTUNE_EMU_SCHEDULE), AddressSanitizer finds the options' copy, a temporary of the
// conditional's arm, destroyed after its scope; with the if, it finds nothing.
std::unique_ptr<Runner> make_runner(bool emulated, EmuOptions emu, int ordinal) {
  if (emulated) return make_emu_runner(std::move(emu));
  return make_gpu_runner(ordinal);
}

}  // namespace ktune::tuner
