// `ktune bench`: the seeds' benchmark tables. `bench adam` is seeds 000/001;
// other benchmarks register their own subcommands here.
#include <fmt/format.h>

#include <iostream>

#include "base/error.hpp"
#include "base/files.hpp"
#include "cli/bench_stop.hpp"
#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "tuner/bench/adam_bench.hpp"
#include "tuner/run/emu_runner.hpp"

namespace ktune::cli {

namespace {

/// The most parameter elements, all tensors together, `bench adam --backend emu` takes.
constexpr std::int64_t kEmulatedElements = std::int64_t{1} << 18;

}  // namespace

void add_bench_command(CLI::App& app, Global& global) {
  auto* bench = app.add_subcommand("bench", "Benchmarks of the seed reports: markdown tables and JSON");
  bench->require_subcommand(1);

  struct AdamOpts {
    std::string tensors = "1,2,4,8,16,32";
    std::string numel = "16384,65536,262144,1048576,4194304";
    std::string dtype = "f32";
    std::string cache, json_out, backend = "gpu";
  };
  auto opts = std::make_shared<AdamOpts>();
  auto* adam = bench->add_subcommand("adam", "AdamW step, ktune's three forms in seeds 000/001's columns: fused per "
                                             "tensor, eager chain per tensor, tuned multi-tensor, with GB/s and % of "
                                             "copy bandwidth");
  adam->add_option("--tensors", opts->tensors, "Numbers of parameter tensors")->capture_default_str();
  adam->add_option("--numel", opts->numel, "Elements per tensor")->capture_default_str();
  adam->add_option("--dtype", opts->dtype, "f32, or bf16 (fp32 master weights plus a bf16 copy)")
      ->capture_default_str();
  adam->add_option("--cache", opts->cache, "Tuned cache to take configs from (default: family defaults)")
      ->check(input_file());
  adam->add_option("--json-out", opts->json_out, "Also write the report as JSON to this file")->check(output_file());
  add_kernel_backend_option(adam, opts->backend,
                            "for small sizes, unless given --tensors 1,2 --numel 1000,4096; no copy bandwidth, so no "
                            "% of copy");
  adam->callback([opts, &global, adam] {
    const bool emulated = opts->backend == "emu";
    if (emulated) {  // the seeds' sizes would take the emulation hours
      if (adam->count("--tensors") == 0) opts->tensors = "1,2";
      if (adam->count("--numel") == 0) opts->numel = "1000,4096";
    }
    const auto tensors = distinct_list(int_list_arg(opts->tensors, "--tensors"), "--tensors");
    const auto numels = distinct_list(int_list_arg(opts->numel, "--numel"), "--numel");
    for (const auto t : tensors)
      for (const auto n : numels)
        KTUNE_REQUIRE(!emulated || t * n <= kEmulatedElements,
                      fmt::format("--backend emu: {} x {} elements (--tensors x --numel) are minutes for the emulation "
                                  "(at most {} in all); give smaller --tensors or --numel, or run on a GPU",
                                  t, n, kEmulatedElements));
    KTUNE_REQUIRE(opts->dtype == "f32" || opts->dtype == "bf16", "--dtype must be f32 or bf16");
    require_distinct_files({{"--cache", opts->cache}}, {{"--json-out", opts->json_out}});
    if (!opts->json_out.empty()) writable_target(opts->json_out, "--json-out");  // before the work, not after
    std::optional<cache::TunedCache> tuned;
    if (!opts->cache.empty()) tuned = cache::TunedCache::read(opts->cache);
    auto runner = tuner::make_runner(emulated);
    const double copy = copy_bandwidth_gbs(emulated);
    const BenchStop stop;  // a signal: the rows so far are written, marked incomplete
    auto report = tuner::run_adam_bench(
        *runner, tensors, numels, opts->dtype, tuned ? &*tuned : nullptr, copy,
        [](const tuner::AdamBenchRow& r) {
          std::cerr << fmt::format("  {} x {}: eager chain {:.4f} ms, per-tensor fused {:.4f} ms, fused {:.4f} ms\n",
                                   r.tensors, r.numel, r.eager_ms, r.single_ms, r.fused_ms);
        },
        stop.check());
    report.completion = stop.completion(report.completion.planned, report.rows.size());
    for (const auto& w : report.warnings) std::cerr << "warning: " << w << "\n";
    write_report(global, opts->json_out, report.to_json(), [&] { return report.markdown(); });
    stop.finish(global, report.completion);
  });
  add_bench_e2e_command(*bench, global);
  add_bench_memory_command(*bench, global);
  add_bench_attention_command(*bench, global);
  add_bench_emu_command(*bench, global);
  add_bench_ops_command(*bench, global);
  add_bench_precision_command(*bench, global);
}

}  // namespace ktune::cli
