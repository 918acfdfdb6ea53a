// `ktune bench ops`: per op of the training step and per model size, the
// eager chain of primitive launches against the tuned fused kernel (ms,
// GB/s, % of the measured copy bandwidth, the floor), as a markdown table or
// JSON. On a GPU, or (--backend emu) on the host emulation for small models.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <optional>

#include "base/error.hpp"
#include "base/files.hpp"
#include "cli/bench_stop.hpp"
#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "model/config.hpp"
#include "model/step_kernels.hpp"
#include "templates/eager/eager.hpp"
#include "tuner/bench/ops_bench.hpp"

namespace ktune::cli {

namespace {

/// The most bytes an op's fused kernel may move under `--backend emu`.
constexpr double kEmulatedBytes = double(std::int64_t{1} << 24);

/// The problem of `family` in one training step of `m` on `batch` sequences of
/// `ctx` tokens, as eager mode launches it (model/step_kernels.hpp: the
/// attention scores materialised, RoPE on q and k one launch each).
templates::Problem step_problem(const std::string& family, const model::ModelConfig& m, std::int64_t batch,
                                std::int64_t ctx, const std::string& dtype) {
  for (const auto& k : model::step_kernels(m, model::RunShape{batch, ctx}, model::parse_precision(dtype),
                                           model::AttentionSaved::kProbabilities, model::RopeLaunch::kEach))
    if (k.family->name() == family) return k.problem;
  throw_error(ErrorKind::kInvalidInput, fmt::format("{} is not one of a training step's kernels", family));
}

}  // namespace

void add_bench_ops_command(CLI::App& bench, Global& global) {
  struct Opts {
    std::string models = "small,medium,large,xl,2.7B";
    std::string ctx = "256,1024";
    std::int64_t batch = 4;
    std::string dtype = "bf16";
    std::string families;
    std::string cache, json_out, backend = "gpu";
    bool pdl = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = bench.add_subcommand("ops", "Per op and model size: the eager chain of primitive kernels vs the tuned "
                                          "fused kernel, ms, GB/s, % of copy bandwidth and the floor");
  cmd->add_option("--model", o->models, "Model sizes, comma-separated")->capture_default_str();
  cmd->add_option("--ctx", o->ctx, "Context lengths")->capture_default_str();
  cmd->add_option("--batch", o->batch, "Sequences per batch")
      ->check(integer_within(1, 1024, "in 1..1024"))
      ->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "f32, or bf16 (mixed precision)")->capture_default_str();
  cmd->add_option("--families", o->families, "Ops to run (default: every family with an eager decomposition)");
  cmd->add_option("--cache", o->cache, "Tuned cache to take fused configs from (default: family defaults)")
      ->check(input_file());
  cmd->add_option("--json-out", o->json_out, "Also write the report as JSON to this file")->check(output_file());
  add_kernel_backend_option(cmd, o->backend,
                            "for small cases, unless given --model tiny --ctx 16; no copy bandwidth, so no floor's "
                            "traffic and no % of copy");
  cmd->add_flag("--pdl", o->pdl,
                "Launch every kernel (eager and fused) with programmatic dependent launch: it may start while the "
                "previous kernel finishes (sm_90 and newer)");
  cmd->callback([o, &global, cmd] {
    KTUNE_REQUIRE(o->dtype == "f32" || o->dtype == "bf16", "--dtype must be f32 or bf16");
    const bool emulated = o->backend == "emu";
    if (emulated) {  // the GPU's model sizes would take the emulation hours
      if (cmd->count("--model") == 0) o->models = "tiny";
      if (cmd->count("--ctx") == 0) o->ctx = "16";
    }
    const auto contexts = distinct_list(int_list_arg(o->ctx, "--ctx"), "--ctx");
    const auto families = cmd->count("--families") == 0 ? templates::eager::decomposed_families()
                                              : distinct_list(name_list_arg(o->families, "--families"), "--families");
    const auto known = templates::eager::decomposed_families();
    for (const auto& f : families)
      KTUNE_REQUIRE(std::find(known.begin(), known.end(), f) != known.end(),
                    fmt::format("--families: '{}' has no eager decomposition; accepted: {}", f,
                                fmt::join(known, ", ")));
    std::vector<tuner::OpsBenchCase> cases;
    for (const auto& name : distinct_list(name_list_arg(o->models, "--model"), "--model")) {
      const model::ModelConfig m = model::model_config(name);
      for (const auto ctx : contexts)
        for (const auto& f : families) {
          const templates::Problem p = step_problem(f, m, o->batch, ctx, o->dtype);
          const templates::Family& family = templates::find_family(f);
          family.check_problem(p);
          KTUNE_REQUIRE(!emulated || family.bytes(p) <= kEmulatedBytes,
                        fmt::format("--backend emu: {} {} moves {:.3g} MB, minutes for the emulation (at most {:.3g}); "
                                    "give smaller --model or --ctx, or run on a GPU",
                                    f, p.key(), family.bytes(p) / 1e6, kEmulatedBytes / 1e6));
          cases.push_back({name, ctx, f, p});
        }
    }
    require_distinct_files({{"--cache", o->cache}}, {{"--json-out", o->json_out}});
    if (!o->json_out.empty()) writable_target(o->json_out, "--json-out");  // before the work, not after
    std::optional<cache::TunedCache> tuned;
    if (!o->cache.empty()) tuned = cache::TunedCache::read(o->cache);
    // No device: one line, exit 2.
    auto backend = emulated ? tuner::exec::make_emu_backend() : tuner::exec::make_cuda_backend();
    backend->set_programmatic(o->pdl);
    const double copy = copy_bandwidth_gbs(emulated);
    tuner::RunOptions options;
    options.seed = 7;
    const BenchStop stop;  // a signal: the rows so far are written, marked incomplete
    auto report = tuner::run_ops_bench(
        *backend, cases, tuned ? &*tuned : nullptr, copy, options,
        [copy](const tuner::OpsBenchRow& r) {
          // As the table: no floor without a copy bandwidth (the emulation).
          std::cerr << fmt::format("  {} ctx {} {}: eager {:.4f} ms, fused {:.4f} ms{}\n", r.op.model, r.op.context,
                                   r.op.family, r.eager_ms, r.fused_ms,
                                   copy > 0 ? fmt::format(", floor {:.4f} ms", r.floor_ms) : std::string());
        },
        stop.check());
    report.completion = stop.completion(report.completion.planned, report.rows.size());
    for (const auto& w : report.warnings) std::cerr << "warning: " << w << "\n";
    write_report(global, o->json_out, report.to_json(), [&] { return report.markdown(); });
    stop.finish(global, report.completion);
  });
}

}  // namespace ktune::cli
