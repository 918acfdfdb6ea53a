#include "tuner/emu_runner.hpp"

#include <chrono>

#include <fmt/format.h>

#include "base/error.hpp"
#include "tuner/emu_memory.hpp"
#include "tuner/emu_module.hpp"

namespace ktune::tuner {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

RunResult failed(std::string failure) {
  RunResult r;
  r.ok = false;
  r.failure = std::move(failure);
  return r;
}

}  // namespace

EmuRunner::EmuRunner(EmuOptions options)
    : device_(DeviceLimits::for_arch(options.arch)), executor_(options.workers) {
  device_.name = "host emulation (" + options.arch + " limits)";
}

RunResult EmuRunner::run(const Family& family, const Config& config, const Problem& problem,
                         const RunOptions& options) {
  try {
    family.check_problem(problem);
    std::string why;
    if (!family.is_valid(config, problem, device_, &why)) return failed("invalid: " + why);

    const auto rendered = family.render(config, problem);
    const auto t0 = Clock::now();
    std::shared_ptr<const emu::Module> module;
    try {
      module = emu::load_module(rendered);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kCompile) throw;
      auto r = failed(std::string("compile: ") + e.what());
      r.compile_ms = ms_since(t0);
      return r;
    }
    const double compile_ms = ms_since(t0);

    const templates::Workload workload = family.make_workload(problem, options.seed);
    std::vector<emu::GuardedBuffer> buffers;
    std::vector<std::uint64_t> addresses;
    buffers.reserve(workload.buffers.size());
    for (const auto& hb : workload.buffers) {
      auto& b = buffers.emplace_back("buffer '" + hb.name + "'", hb.bytes.size());
      if (hb.role == templates::Role::kInput || hb.role == templates::Role::kInOut)
        std::memcpy(b.data(), hb.bytes.data(), hb.bytes.size());
      else
        b.fill(0xff);  // NaN in every float format: an output never written fails validation
      addresses.push_back(reinterpret_cast<std::uint64_t>(b.data()));
    }
    std::vector<const emu::Region*> regions;
    for (const auto& b : buffers) regions.push_back(&b.region());

    auto launches = family.plan(config, problem, addresses, device_);
    const auto started = std::chrono::steady_clock::now();
    for (auto& l : launches) {
      if (l.kernel < 0 || static_cast<std::size_t>(l.kernel) >= module->kernels.size())
        return failed(fmt::format("launch: the plan names kernel {}, the source has {}", l.kernel,
                                  module->kernels.size()));
      const std::string& name = module->kernel_names[static_cast<std::size_t>(l.kernel)];
      const long long threads = static_cast<long long>(l.block[0]) * l.block[1] * l.block[2];
      if (threads < 1 || threads > device_.max_threads_per_block)
        return failed(fmt::format("launch: {} with {} threads per block; {} allows 1..{}", name, threads,
                                  device_.arch, device_.max_threads_per_block));
      if (l.dynamic_smem > static_cast<unsigned>(device_.max_smem_per_block))
        return failed(fmt::format("launch: {} asks for {} bytes of dynamic shared memory; {} allows {}", name,
                                  l.dynamic_smem, device_.arch, device_.max_smem_per_block));
      auto args = l.args.pointers();
      emu::GridLaunch g;
      g.module = module.get();
      g.kernel = l.kernel;
      g.grid = l.grid;
      g.block = l.block;
      g.dynamic_smem = l.dynamic_smem;
      g.args = args.data();
      g.regions = regions;
      try {
        executor_.run(g);
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::kCheckFailed) throw;
        auto r = failed(e.what());
        r.compile_ms = compile_ms;
        return r;
      }
      for (const auto& b : buffers)
        if (auto bad = b.check_canary(); !bad.empty()) {
          auto r = failed(fmt::format("emulation: {} by kernel {}", bad, name));
          r.compile_ms = compile_ms;
          return r;
        }
    }

    std::vector<std::vector<std::byte>> results;
    for (const auto& b : buffers) results.emplace_back(b.data(), b.data() + b.size());
    RunResult r;
    r.compile_ms = compile_ms;
    if (options.validate) {
      check_results(workload, results, r);
    } else {
      r.ok = true;
    }
    if (options.time && r.ok) {
      // Host wall time of one emulated run: it ranks nothing on a GPU, but
      // lets a whole tuning session run end to end without one.
      Measurement m;
      m.median_ms = m.p20_ms = m.p80_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
      m.repetitions = 1;
      m.method = "host emulation wall time of one run (not a GPU measurement)";
      r.timing = m;
    }
    return r;
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kInvalidInput) throw;  // a bad problem or config is the caller's error
    return failed(std::string("emulation: ") + e.what());
  }
}

std::unique_ptr<Runner> make_emu_runner(EmuOptions options) { return std::make_unique<EmuRunner>(options); }

}  // namespace ktune::tuner
