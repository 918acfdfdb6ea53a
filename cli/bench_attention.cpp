// `ktune bench attention`: the attention benchmarks on a GPU. Seed 003's
// table (batch 8, one head, head dim x sequence length: forward ms, backward
// ms, memory after forward), the CS336 leaderboard's case (batch 1, 16
// heads, head dim 64, seq 16384, bf16, causal, forward + backward) and the
// causal forward at head dim 128, seq 16384 (--tables picks among the
// three); TFLOP/s with a causal mask counting half the square and the
// backward 2.5 x the forward. Configs come from the tuned cache (--cache) or
// the family defaults; every variant is checked against the reference (a
// seeded sample of rows at these sizes) before it is timed. Seed 003's table
// also has eager attention's columns, its baseline: the runtime's eager mode's
// materialised attention (model/attention_bench.hpp), unless --no-eager. A variant that
// fails leaves its cells empty with the reason beside the table, the other
// rows are still measured, and the command exits 1. Markdown, or JSON with
// device, driver, date and git revision.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iostream>
#include <optional>

#include "base/error.hpp"
#include "base/files.hpp"
#include "base/stamp.hpp"
#include "cache/tuned_cache.hpp"
#include "cli/bench_stop.hpp"
#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "model/attention_bench.hpp"
#include "templates/attention/attention.hpp"
#include "tuner/bench/copy_text.hpp"
#include "tuner/exec/backend.hpp"
#include "tuner/run/emu_runner.hpp"
#include "tuner/session/tuned_kernels.hpp"

namespace ktune::cli {

namespace {

namespace at = templates::attention;

struct Timed {
  double ms = 0, p20_ms = 0, p80_ms = 0;
  std::string config, source;
  std::vector<double> samples_ms;  ///< every repetition, in order
  std::string method;              ///< how this cell was timed (its launches, repetitions)
};

struct Row {
  std::string table;  ///< "seed003", "leaderboard" or "causal_fwd_d128"
  templates::Problem problem;
  std::optional<Timed> forward, backward;
  std::optional<Timed> eager_forward, eager_backward;  ///< seed 003's baseline, materialised attention
  std::optional<Timed> eager_softmax;  ///< the eager forward's softmax launch alone
  std::vector<std::string> failures;  ///< "attention_fwd {config}: why", per pass that failed
  double forward_tflops = 0, backward_tflops = 0, total_ms = 0, total_tflops = 0;
  double memory_after_forward_mib = 0;  ///< q, k, v, o and lse, as the runtime keeps them for the backward
  double eager_memory_after_forward_mib = 0;  ///< q, k, v, o and the probabilities
};

templates::Problem attention_problem(const std::string& dtype, std::int64_t batch, std::int64_t heads,
                                     std::int64_t head_dim, std::int64_t seq, bool causal) {
  return templates::Problem{dtype,
                            {{"batch", batch}, {"heads", heads}, {"seq", seq}, {"head_dim", head_dim},
                             {"causal", causal ? 1 : 0}}};
}

Row row(const char* table, templates::Problem problem) {
  Row r;
  r.table = table;
  r.problem = std::move(problem);
  return r;
}

double memory_after_forward_mib(const templates::Problem& p) {
  const double elements = static_cast<double>(p.dim("batch") * p.dim("heads") * p.dim("seq") * p.dim("head_dim"));
  const double element_bytes = p.dtype == "f32" ? 4 : 2;
  const double lse = 4.0 * static_cast<double>(p.dim("batch") * p.dim("heads") * p.dim("seq"));
  return (4 * elements * element_bytes + lse) / (1024.0 * 1024.0);
}

std::string ms(const std::optional<Timed>& t) { return t ? fmt::format("{:.4f}", t->ms) : std::string("-"); }
/// The eager forward's softmax over the whole eager forward (both medians).
double softmax_share(const Row& r) { return r.eager_softmax->ms / r.eager_forward->ms; }
std::string softmax_cell(const Row& r) {
  if (!r.eager_softmax) return "-";
  // Timed apart from the forward: on a noisy host (the emulation) its median can exceed the whole's.
  const double share = softmax_share(r);
  return share <= 1 ? fmt::format("{:.4f} ({:.1f} %)", r.eager_softmax->ms, 100 * share)
                    : fmt::format("{:.4f} (timed apart, above the forward's median)", r.eager_softmax->ms);
}
std::string tflops(double v) { return v > 0 ? fmt::format("{:.1f}", v) : std::string("-"); }

nlohmann::json to_json(const Timed& t) {
  return {{"median_ms", t.ms}, {"p20_ms", t.p20_ms}, {"p80_ms", t.p80_ms}, {"config", t.config},
          {"config_source", t.source}, {"samples_ms", t.samples_ms}, {"method", t.method}};
}

const std::vector<std::string> kTables = {"seed003", "leaderboard", "causal_fwd_d128"};
/// The most multiply-adds of one attention pass `--backend emu` takes on
/// (about a minute of the emulation for the table's four passes).
constexpr double kEmulatedMacs = double(std::int64_t{1} << 28);

}  // namespace

void add_bench_attention_command(CLI::App& bench, Global& global) {
  struct Opts {
    std::string tables = fmt::format("{}", fmt::join(kTables, ","));
    std::string dims = "16,32,64,128";
    std::string seqs = "256,1024,4096,8192,16384";
    std::string dtype = "f32";
    bool causal = false, no_eager = false;
    std::string cache, json_out, backend = "gpu";
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = bench.add_subcommand(
      "attention", "Attention on the GPU: seed 003's table (batch 8, one head; flash beside eager mode's "
                   "materialised attention), the CS336 leaderboard case and the causal forward at head dim 128, seq "
                   "16384, with TFLOP/s");
  cmd->add_option("--tables", o->tables,
                  "Which cases, comma-separated: seed003 (the table of --dims x --seqs), leaderboard, causal_fwd_d128")
      ->capture_default_str();
  cmd->add_option("--dims", o->dims, "Head dims of the seed 003 table")->capture_default_str();
  cmd->add_option("--seqs", o->seqs, "Sequence lengths of the seed 003 table")->capture_default_str();
  cmd->add_option("--dtype", o->dtype,
                  "dtype of the seed 003 table: f32 (flash on the tf32 matrix units, eager in f32), bf16 (flash and "
                  "eager), or f16 (flash only)")
      ->capture_default_str();
  cmd->add_flag("--causal", o->causal, "Causal mask in the seed 003 table (the two other cases always use one)");
  cmd->add_flag("--no-eager", o->no_eager,
                "Leave out the seed 003 table's eager columns (eager mode's materialised attention: GEMMs, softmax, "
                "GEMMs; f32 and bf16)");
  cmd->add_option("--cache", o->cache, "Tuned cache to take configs from (default: family defaults)")
      ->check(input_file());
  cmd->add_option("--json-out", o->json_out, "Also write the report as JSON to this file")->check(output_file());
  add_kernel_backend_option(cmd, o->backend,
                            "for small cases, the whole benchmark checked; unless given, --tables seed003 --dims "
                            "16,64 --seqs 37,128");
  cmd->callback([o, &global, cmd] {
    // The targets' and the seed's sequences of thousands would take the emulation hours.
    const bool emulated = o->backend == "emu";
    if (emulated) {
      if (cmd->count("--tables") == 0) o->tables = "seed003";
      if (cmd->count("--dims") == 0) o->dims = "16,64";
      if (cmd->count("--seqs") == 0) o->seqs = "37,128";
    }
    const auto tables = distinct_list(name_list_arg(o->tables, "--tables"), "--tables");
    for (const auto& t : tables)
      KTUNE_REQUIRE(std::find(kTables.begin(), kTables.end(), t) != kTables.end(),
                    fmt::format("--tables: unknown table '{}'; one of: {}", t, fmt::join(kTables, ", ")));
    const auto dims = distinct_list(int_list_arg(o->dims, "--dims"), "--dims");
    const auto seqs = distinct_list(int_list_arg(o->seqs, "--seqs"), "--seqs");
    const auto wanted = [&](const char* table) {
      return std::find(tables.begin(), tables.end(), table) != tables.end();
    };
    std::vector<Row> rows;
    if (wanted("seed003"))
      for (const auto d : dims)
        for (const auto s : seqs) rows.push_back(row("seed003", attention_problem(o->dtype, 8, 1, d, s, o->causal)));
    if (wanted("leaderboard")) rows.push_back(row("leaderboard", attention_problem("bf16", 1, 16, 64, 16384, true)));
    if (wanted("causal_fwd_d128"))
      rows.push_back(row("causal_fwd_d128", attention_problem("bf16", 1, 16, 128, 16384, true)));
    for (const auto& r : rows) {  // bad input before the device
      at::forward_family().check_problem(r.problem);
      const auto& p = r.problem;
      const double macs = static_cast<double>(p.dim("batch") * p.dim("heads") * p.dim("head_dim")) *
                          static_cast<double>(p.dim("seq")) * static_cast<double>(p.dim("seq"));
      KTUNE_REQUIRE(!emulated || macs <= kEmulatedMacs,
                    fmt::format("--backend emu: {} {} is {:.2g} multiply-adds a pass, hours for the emulation (at "
                                "most {:.2g}); {}",
                                r.table, p.key(), macs, kEmulatedMacs,
                                r.table == "seed003" ? "give smaller --seqs or --dims, or run on a GPU"
                                                     : "its shape is fixed: run it on a GPU, or give --tables seed003 "
                                                       "(whose --seqs and --dims fit the emulation)"));
    }
    require_distinct_files({{"--cache", o->cache}}, {{"--json-out", o->json_out}});
    if (!o->json_out.empty()) writable_target(o->json_out, "--json-out");    // before the work, not after
    std::optional<cache::TunedCache> tuned;
    if (!o->cache.empty()) tuned = cache::TunedCache::read(o->cache);
    // Throws "no CUDA device: ..." (exit 2) without one.
    auto runner = tuner::make_runner(emulated);
    const DeviceLimits device = runner->device();
    std::vector<std::string> warnings;
    std::string method;
    tuner::RunOptions run;
    run.validate = true;
    run.time = true;
    // A variant that fails (compile, launch, validation) is the row's
    // failure, and the next row is measured.
    auto time = [&](Row& row, const templates::Family& f) -> std::optional<Timed> {
      const auto chosen = tuner::choose_config(f, row.problem, device, tuned ? &*tuned : nullptr, &warnings);
      const auto r = runner->run(f, chosen.config, row.problem, run);
      if (!r.ok || !r.timing) {
        row.failures.push_back(fmt::format("{} {}: {}", f.name(), chosen.config.str(), r.failure));
        return std::nullopt;
      }
      // The first cell's method heads the report, said to be its (a backward is several launches); each cell's
      // is in the JSON.
      if (method.empty())
        method = r.timing->method + " (the first forward's; every cell times its own launches so, repetitions as "
                                    "its time asks; the JSON gives each cell's method)";
      return Timed{r.timing->median_ms, r.timing->p20_ms, r.timing->p80_ms, chosen.config.str(), chosen.source,
                   r.timing->samples_ms, r.timing->method};
    };
    // A signal: the rows measured so far are written, marked incomplete; the rows not reached are left out.
    const BenchStop stop;
    std::size_t reached = 0;
    for (auto& r : rows) {
      if (stop.requested()) break;
      ++reached;
      r.memory_after_forward_mib = memory_after_forward_mib(r.problem);
      r.forward = time(r, at::forward_family());
      // TFLOP/s of a GPU's times only: the emulation's host time would read as one; they stay 0 ("-", null).
      if (r.forward && !emulated)
        r.forward_tflops = at::forward_family().flops(r.problem) / (r.forward->ms * 1e-3) / 1e12;
      if (r.table != "causal_fwd_d128") {
        r.backward = time(r, at::backward_family());
        if (r.backward && !emulated)
          r.backward_tflops = at::backward_family().flops(r.problem) / (r.backward->ms * 1e-3) / 1e12;
        if (r.forward && r.backward) {
          r.total_ms = r.forward->ms + r.backward->ms;
          if (!emulated)
            r.total_tflops = (at::forward_family().flops(r.problem) + at::backward_family().flops(r.problem)) /
                             (r.total_ms * 1e-3) / 1e12;
        }
      }
      for (const auto& f : r.failures) std::cerr << fmt::format("  {} {}: FAILED {}\n", r.table, r.problem.key(), f);
      std::cerr << fmt::format("  {} {}: forward {} ms, backward {} ms\n", r.table, r.problem.key(), ms(r.forward),
                               ms(r.backward));
    }
    const std::size_t planned = rows.size();
    rows.resize(reached);
    // Eager attention after every flash row, on a backend of its own (the runner's work is done).
    const auto eager = [&](const Row& r) {
      return !o->no_eager && r.table == "seed003" && model::eager_attention_supports(r.problem);
    };
    // A row is measured once its flash passes and, where it has them, its eager passes are.
    std::size_t measured = 0;
    for (const auto& r : rows) measured += eager(r) ? 0 : 1;
    if (!stop.requested() && std::any_of(rows.begin(), rows.end(), eager)) {
      runner.reset();
      auto backend = emulated ? tuner::exec::make_emu_backend() : tuner::exec::make_cuda_backend();
      for (auto& r : rows) {
        if (!eager(r)) continue;
        if (stop.requested()) break;
        ++measured;
        try {
          const auto e = model::bench_eager_attention(*backend, r.problem, run);
          r.eager_forward =
              Timed{e.forward.median_ms, e.forward.p20_ms, e.forward.p80_ms, "", e.gemms, e.forward.samples_ms,
                    e.forward.method};
          r.eager_backward =
              Timed{e.backward.median_ms, e.backward.p20_ms, e.backward.p80_ms, "", e.gemms, e.backward.samples_ms,
                    e.backward.method};
          r.eager_softmax =
              Timed{e.softmax.median_ms, e.softmax.p20_ms, e.softmax.p80_ms, "", "", e.softmax.samples_ms,
                    e.softmax.method};
          r.eager_memory_after_forward_mib = e.memory_after_forward_bytes / (1024.0 * 1024.0);
        } catch (const Error& e) {
          if (e.kind() == ErrorKind::kNoDevice) throw;
          r.failures.push_back(fmt::format("eager attention: {}", e.what()));
        }
        std::cerr << fmt::format("  {} {}: eager forward {} ms (softmax {}), backward {} ms\n", r.table,
                                 r.problem.key(), ms(r.eager_forward), ms(r.eager_softmax), ms(r.eager_backward));
      }
    }
    for (const auto& w : warnings) std::cerr << "warning: " << w << "\n";
    const auto failed = std::count_if(rows.begin(), rows.end(), [](const Row& r) { return !r.failures.empty(); });

    nlohmann::json j = {{"benchmark", "attention"}, {"device", device.name + " (" + device.arch + ")"},
                        {"date", utc_now()},
                        {"git_revision", git_revision()}, {"ktune_version", ktune_version()},
                        {"configs", o->cache.empty() ? "family defaults" : "tuned cache " + o->cache},
                        {"method", method}, {"rows", nlohmann::json::array()}};
    tuner::add_driver(j, device.driver_version);
    const tuner::Completion completion = stop.completion(planned, measured);
    completion.add_to(j);
    for (const auto& r : rows) {
      nlohmann::json row = {{"table", r.table}, {"problem", r.problem.key()}, {"dtype", r.problem.dtype},
                            {"batch", r.problem.dim("batch")}, {"heads", r.problem.dim("heads")},
                            {"head_dim", r.problem.dim("head_dim")}, {"seq", r.problem.dim("seq")},
                            {"causal", r.problem.dim("causal") != 0},
                            {"memory_after_forward_mib", r.memory_after_forward_mib}};
      if (r.forward) {
        row["forward"] = to_json(*r.forward);
        row["forward_tflops"] = tuner::measured_or_null(r.forward_tflops);
      }
      if (r.backward) {
        row["backward"] = to_json(*r.backward);
        row["backward_tflops"] = tuner::measured_or_null(r.backward_tflops);
      }
      if (r.eager_forward) {
        row["eager_forward"] = to_json(*r.eager_forward);
        row["eager_backward"] = to_json(*r.eager_backward);
        row["eager_softmax"] = to_json(*r.eager_softmax);
        // A share above the whole (separate timings on a noisy host) is no share: null, as the table says.
        row["eager_softmax_share"] = softmax_share(r) <= 1 ? nlohmann::json(softmax_share(r)) : nlohmann::json();
        row["eager_memory_after_forward_mib"] = r.eager_memory_after_forward_mib;
      }
      if (r.forward && r.backward) {
        row["forward_backward_ms"] = r.total_ms;
        row["forward_backward_tflops"] = tuner::measured_or_null(r.total_tflops);
      }
      if (!r.failures.empty()) row["failures"] = r.failures;
      j["rows"].push_back(row);
    }
    write_report(global, o->json_out, j, [&] {
      std::string s = fmt::format("# Attention ({}; {}; {}; ktune {} (git {}); {})\n\n",
                                  j["device"].get<std::string>(), tuner::driver_text(device.driver_version),
                                  j["date"].get<std::string>(),
                                  ktune_version(), git_revision(), j["configs"].get<std::string>());
      if (wanted("seed003")) {
        s += fmt::format("Seed 003: batch 8, one head, {}{}; ms per pass (median; the seed's times, \"100 passes\" "
                         "without a unit, are seconds per 100 passes: 10 x a seed figure is ms per pass, "
                         "docs/seeds.md), TFLOP/s (causal counts half the square, backward 2.5 x forward). Eager: "
                         "eager mode's materialised attention (GEMMs, softmax, GEMMs{}), keeping q, k, v, o and the "
                         "probabilities, and its softmax launch alone with its share of the eager forward; flash: "
                         "attention_fwd and attention_bwd{}, keeping q, k, v, o and lse. Memory: the bytes of the "
                         "tensors kept, computed (the seed's and PyTorch's are torch.cuda.memory_allocated).\n\n",
                         o->dtype == "f32" ? "f32" : o->dtype, o->causal ? ", causal" : "",
                         o->dtype == "f32" ? "; f32 GEMMs, as PyTorch's default" : "",
                         o->dtype == "f32" ? " on the tf32 matrix units" : "");
        s += "| d_model | seq_len | eager forward | of it softmax | flash forward | flash forward TFLOP/s | eager "
             "backward | flash backward | flash backward TFLOP/s | memory kept after forward, eager (MiB, computed) | "
             "flash (MiB, computed) |\n"
             "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n";
        for (const auto& r : rows)
          if (r.table == "seed003")
            s += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2f} |\n",
                             r.problem.dim("head_dim"), r.problem.dim("seq"), ms(r.eager_forward), softmax_cell(r),
                             ms(r.forward), tflops(r.forward_tflops),
                             ms(r.eager_backward), ms(r.backward), tflops(r.backward_tflops),
                             r.eager_forward ? fmt::format("{:.2f}", r.eager_memory_after_forward_mib) : "-",
                             r.memory_after_forward_mib);
        s += "\n";
      }
      if (wanted("leaderboard") || wanted("causal_fwd_d128")) {
        s += "| case | forward ms | forward TFLOP/s | backward ms | backward TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s | "
             "configs |\n|:--|--:|--:|--:|--:|--:|--:|:--|\n";
        for (const auto& r : rows) {
          if (r.table == "seed003") continue;
          std::vector<std::string> configs;
          if (r.forward) configs.push_back("fwd " + r.forward->config);
          if (r.backward) configs.push_back("bwd " + r.backward->config);
          s += fmt::format("| {} ({}) | {} | {} | {} | {} | {} | {} | {} |\n", r.table, r.problem.key(), ms(r.forward),
                           tflops(r.forward_tflops), ms(r.backward), tflops(r.backward_tflops),
                           r.forward && r.backward ? fmt::format("{:.4f}", r.total_ms) : std::string("-"),
                           tflops(r.total_tflops), fmt::format("{}", fmt::join(configs, "; ")));
        }
        s += "\n";
      }
      if (failed > 0) {
        s += "Failed (cells left empty):\n";
        for (const auto& r : rows)
          for (const auto& f : r.failures) s += fmt::format("- {} {}: {}\n", r.table, r.problem.key(), f);
        s += "\n";
      }
      s += "Timing: " + method + "\n";
      // Under the emulation the two sides run on different engines: no comparison, no share.
      if (emulated && std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.eager_forward.has_value(); }))
        s += fmt::format("Eager columns: eager mode's attention on the host ({}), host wall time of its launches, not "
                         "emulated kernels: not comparable with the flash columns, and the softmax's share is the "
                         "host's, not a GPU's.\n",
                         std::find_if(rows.begin(), rows.end(), [](const Row& r) {
                           return r.eager_forward.has_value();
                         })->eager_forward->source);
      if (!completion.complete()) s += "\n" + completion.markdown();
      return s;
    });
    // Exit 1 once the report is out: some variant failed (128 + the signal where one stopped the run).
    stop.finish(global, completion);
    if (failed > 0 && !stop.requested())
      throw_error(ErrorKind::kCheckFailed, fmt::format("{} of {} attention cases failed", failed, rows.size()));
  });
}

}  // namespace ktune::cli
