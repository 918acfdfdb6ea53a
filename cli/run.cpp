// `ktune run`: one variant of a family on one problem, on the GPU or emulated
// on the CPU, compared with the CPU reference; and `ktune bench emu`, the
// emulation backend's speed.
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>

#include "base/env.hpp"
#include "base/error.hpp"
#include "base/json_output.hpp"
#include "cache/tuned_cache.hpp"
#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "spec/spec_family.hpp"
#include "tuner/cuda/gpu_marks.hpp"
#include "tuner/run/emu_runner.hpp"
#include "tuner/emu/speed.hpp"
#include "tuner/run/isolated_runner.hpp"
#include "tuner/session/tuned_kernels.hpp"

namespace ktune::cli {
namespace {

struct RunArgs {
  std::string backend = "emu";
  std::string family;
  std::string spec;
  std::string config;
  std::string problem;
  std::uint64_t seed = 1;
  std::string arch = kDefaultArch;
  unsigned workers = 0;
  bool emulation_options = false;  ///< --arch or --workers given: they shape the emulation only
  bool time = false;
  double timeout_s = 0;  ///< > 0: the variant runs in a worker process, killed past it
  std::string cache;     ///< a tuned cache: its config for the problem on the device
  std::string parameters;  ///< run-time parameters as JSON
};

void run_variant(const RunArgs& a, const Global& global) {
  const auto& family = family_arg(a.family, a.spec);
  KTUNE_REQUIRE(!a.time || a.backend == "gpu",
                "--time times the variant on the GPU (--backend gpu); the emulation's times would be host wall times");
  KTUNE_REQUIRE(a.backend == "emu" || !a.emulation_options,
                "--arch and --workers shape the emulation (--backend emu); on --backend gpu the device's own "
                "architecture runs the variant");
  if (a.backend == "emu")
    if (const auto* s = dynamic_cast<const spec::SpecFamily*>(&family)) s->require_emulation();
  // With --timeout the variant runs in a worker process, killed past it.
  const auto runner_of = [&a, &family](const std::function<std::unique_ptr<tuner::Runner>()>& make) {
    if (a.timeout_s <= 0) return make();
    tuner::IsolationOptions isolation;
    isolation.timeout_s = a.timeout_s;
    if (dynamic_cast<const spec::SpecFamily*>(&family)) isolation.extra_families.push_back(&family);
    return tuner::make_isolated_runner(make, isolation);
  };
  const std::unique_ptr<tuner::Runner> runner = runner_of([&a] {
    return tuner::make_runner(a.backend == "emu", {a.workers, a.arch});
  });
  const auto problem = problem_arg(family, a.problem);
  const auto parameters = parameters_arg(family, problem, a.parameters);
  // The config a tuned cache holds for the problem on this device (exact, else nearest, else the default), as
  // the runtime would choose it; or --config's.
  std::optional<tuner::ChosenConfig> chosen;
  if (!a.cache.empty()) {
    const auto tuned = cache::TunedCache::read(a.cache);
    std::vector<std::string> warnings;
    chosen = tuner::choose_config(family, problem, runner->device(), &tuned, &warnings);
    for (const auto& w : warnings) std::cerr << "warning: " << w << "\n";
  }
  const auto config = chosen ? chosen->config : config_arg(family, problem, a.config, runner->device());
  // A default that stands in for the declared one (a spec's that breaks its own restriction) is said, as render does.
  std::string stands_in;
  if (!chosen && a.config.empty())
    if (const auto invalid = invalid_default(family, problem, runner->device(), config))
      stands_in = fmt::format(" (stands in for the default {}, which is not valid here: {})", invalid->declared.str(),
                              invalid->why);
  tuner::RunOptions options;
  options.seed = a.seed;
  options.time = a.time;
  options.per_launch = options.time;
  options.scalars = parameters;
  // What runs goes out first: a variant that hangs (without --timeout) has said what it is.
  if (!global.json)
    std::cout << fmt::format("{} {} on {} ({}), config {}{}{}\n", family.name(), problem.key(), runner->backend(),
                             runner->device().name, config.str(),
                             chosen ? fmt::format(" ({}: {})", a.cache, chosen->source) : "", stands_in)
              << std::flush;
  const auto r = runner->run(family, config, problem, options);
  if (r.timing)
    for (const auto& other : r.timing->shared_with)
      std::cerr << tuner::shared_gpu_warning(other, "run") << "\n";

  if (global.json) {
    nlohmann::json j = {{"family", family.name()},   {"problem", problem.to_json()}, {"config", config.to_json()},
                        {"backend", runner->backend()}, {"device", runner->device().name}, {"ok", r.ok},
                        {"failure", r.failure},      {"max_error", r.max_error},   {"compile_ms", r.compile_ms}};
    for (const auto& [name, e] : r.errors) j["errors"][name] = e;
    for (const auto& e : r.rms_errors) j["rms_errors"][e.buffer] = {{"rms", e.rms}, {"atol", e.atol}};
    if (chosen) j["config_source"] = chosen->source;
    if (!stands_in.empty()) j["config_source"] = "default" + stands_in;
    if (r.timing) j["median_ms"] = r.timing->median_ms;
    if (r.timing && !r.timing->shared_with.empty()) j["shared_with"] = r.timing->shared_with;
    for (const auto& [kernel, m] : r.launch_timings)
      j["launches"].push_back({{"kernel", kernel}, {"median_ms", m.median_ms}});
    std::cout << dump_json(j) << "\n";
  } else {
    // A buffer with an atol passes within either tolerance: its RMS error beside the relative one, which is
    // large (or infinite) where the answer is near zero.
    for (const auto& [name, e] : r.errors) {
      const auto rms = std::ranges::find(r.rms_errors, name, &tuner::RunResult::RmsError::buffer);
      std::cout << fmt::format("  {:<24} relative L2 error {:.3g}{}\n", name, e,
                               rms == r.rms_errors.end()
                                   ? ""
                                   : fmt::format(", RMS error {:.3g} (atol {:.1g})", rms->rms, rms->atol));
    }
    if (r.timing)
      std::cout << fmt::format("  time: median {:.4f} ms (p20 {:.4f}, p80 {:.4f}; {})\n", r.timing->median_ms,
                               r.timing->p20_ms, r.timing->p80_ms, r.timing->method);
    // A plan of several launches: each alone, the same way.
    for (const auto& [kernel, m] : r.launch_timings)
      std::cout << fmt::format("    {}: median {:.4f} ms (p20 {:.4f}, p80 {:.4f})\n",
                               kernel.substr(0, kernel.find('<')), m.median_ms, m.p20_ms, m.p80_ms);
    std::cout << (r.ok ? "PASS" : "FAIL: " + r.failure) << fmt::format(" (compile {:.0f} ms)\n", r.compile_ms);
  }
  // A wrong answer from threads run out of order may be a race: the same variant run in order tells.
  if (!r.ok && a.backend == "emu" && r.failure.rfind("validation:", 0) == 0 &&
      env::emu_schedule().order != env::EmuSchedule::Order::kInOrder) {
    const auto again = runner_of([&a] { return tuner::make_emu_runner({a.workers, a.arch, env::EmuSchedule{}}); })
                           ->run(family, config, problem, options);
    std::cerr << (again.ok ? "note: run again with its threads in order (KTUNE_EMU_SCHEDULE=in-order), it passes: "
                             "the result depends on the order the threads run in, as on a GPU: a missing "
                             "__syncthreads or __syncwarp (threads reading what others write before they wait)\n"
                           : "note: run again with its threads in order (KTUNE_EMU_SCHEDULE=in-order), it fails "
                             "too: not a matter of the order of its warps; in order each thread still runs alone to "
                             "its next barrier or warp collective (lane 0 before lane 1 starts), so lanes of a warp "
                             "that read each other's shared memory with no __syncwarp between (a warp-synchronous "
                             "reduction without volatile and __syncwarp) fail in every order\n");
  }
  if (!r.ok) throw Error(ErrorKind::kCheckFailed, family.name() + " failed: " + r.failure);
}

}  // namespace

void add_run_command(CLI::App& app, Global& global) {
  auto args = std::make_shared<RunArgs>();
  auto* cmd = app.add_subcommand("run", "Run one variant on one problem (on the GPU, or emulated on the CPU) and "
                                        "compare it with the CPU reference");
  add_kernel_backend_option(cmd, args->backend, "runs any family's kernels");
  cmd->add_option("--family", args->family, "Kernel family, " + family_choices());
  cmd->add_option("--spec", args->spec, spec_help())->check(input_file());
  cmd->add_option("--config", args->config, "Config as JSON; missing tunables take the default on the device")
      ->check(json_text());
  cmd->add_option("--problem", args->problem, std::string(kProblemHelp) + "; default: the family's first problem class")
      ->check(json_text());
  cmd->add_option("--parameters", args->parameters, kParametersHelp)->check(json_text());
  cmd->add_option("--seed", args->seed, "Seed of the random inputs")
      ->check(integer_at_least(0))
      ->capture_default_str();
  cmd->add_option("--arch", args->arch, "Emulation: whose limits the emulated device has")->capture_default_str();
  cmd->add_option("--workers", args->workers, "Emulation: OS threads running blocks (0: all hardware threads)")
      ->check(integer_within(0, 1024, "in 0..1024"));
  cmd->add_flag("--time", args->time,
                "GPU: also time the variant, and each launch of a plan of several alone (attention_bwd: D, dK and "
                "dV, dQ)");
  cmd->add_option("--cache", args->cache,
                  "Tuned cache: run the config it holds for the problem on this device (exact, else nearest, else "
                  "the default), as the runtime chooses it")
      ->check(input_file())
      ->excludes("--config");
  cmd->add_option("--timeout", args->timeout_s,
                  "Seconds the variant may take (compile included): it then runs in a worker process, killed past "
                  "them, and a crash or a hang is a FAIL (default: in this process, no limit)")
      ->check(finite_in(0, 7 * 24 * 3600, true))
      ->default_str("none");
  cmd->callback([args, cmd, &global] {
    args->emulation_options = cmd->count("--arch") + cmd->count("--workers") > 0;
    run_variant(*args, global);
  });
}

void add_bench_emu_command(CLI::App& bench, Global& global) {
  struct Args {
    unsigned threads = 256, blocks = 16, barriers = 200, workers = 0;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = bench.add_subcommand("emu", "Speed of the host emulation: thread-barriers and warp shuffles per second");
  cmd->add_option("--block-threads", args->threads, "CUDA threads per block (a multiple of 32 in 32..1024)")
      ->capture_default_str();
  cmd->add_option("--blocks", args->blocks, "Blocks")
      ->check(integer_within(1, 65535, "in 1..65535"))
      ->capture_default_str();
  cmd->add_option("--barriers", args->barriers, "__syncthreads (and shuffles) per thread")
      ->check(integer_within(1, 10000000, "in 1..10000000"))
      ->capture_default_str();
  cmd->add_option("--workers", args->workers, "OS threads running blocks (0: all hardware threads)")
      ->check(integer_within(0, 1024, "in 0..1024"));
  cmd->callback([args, &global] {
    const auto s = tuner::measure_emu_speed(args->threads, args->blocks, args->barriers, args->workers);
    if (global.json) {
      std::cout << nlohmann::json{{"block_threads", s.block_threads},
                                  {"blocks", s.blocks},
                                  {"barriers", s.barriers},
                                  {"workers", s.workers},
                                  {"thread_barriers_per_second", s.thread_barriers_per_second},
                                  {"lane_shuffles_per_second", s.lane_shuffles_per_second}}
                       .dump()
                << "\n";
      return;
    }
    std::cout << fmt::format("emulation, {} blocks x {} threads, {} worker thread(s):\n", s.blocks, s.block_threads,
                             s.workers);
    std::cout << fmt::format("  __syncthreads:   {:.2f} M thread-barriers/s ({} per thread, {:.3f} s)\n",
                             s.thread_barriers_per_second / 1e6, s.barriers, s.barrier_seconds);
    std::cout << fmt::format("  __shfl_xor_sync: {:.2f} M lane-shuffles/s ({} per thread, {:.3f} s)\n",
                             s.lane_shuffles_per_second / 1e6, s.barriers, s.shuffle_seconds);
  });
}

}  // namespace ktune::cli
