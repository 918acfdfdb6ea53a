// `ktune compile`: render and compile variants with NVRTC (no GPU needed),
// with progress on stderr; print one row per family (per variant with
// --verbose) and a summary line; exit 1 on any failure.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <set>

#include "base/env.hpp"
#include "base/error.hpp"
#include "base/files.hpp"
#include "base/json_output.hpp"
#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "cli/progress.hpp"
#include "cli/stop_signals.hpp"
#include "cli/table.hpp"
#include "tuner/compile/compile_check.hpp"

namespace ktune::cli {
namespace {

/// The largest registers, spill bytes and static shared memory of a variant's kernels.
struct Resources {
  int registers = 0, spills = 0, smem = 0;
};
Resources resources_of(const tuner::CompileCheckRow& r) {
  Resources out;
  for (const auto& k : r.result.kernels) {
    out.registers = std::max(out.registers, k.registers);
    out.spills = std::max(out.spills, k.spill_bytes());
    out.smem = std::max(out.smem, k.static_smem_bytes);
  }
  return out;
}

/// One row per family: variants, failures, invalid points, register range,
/// spilling variants, compile time, cached variants.
std::string family_table(const tuner::CompileCheckSummary& s, bool failures_only) {
  struct Row {
    std::size_t variants = 0, failed = 0, spilling = 0, cached = 0;
    int min_regs = 1 << 30, max_regs = 0, max_smem = 0;
    double compile_s = 0;
  };
  std::vector<std::string> order;
  std::map<std::string, Row> rows;
  std::set<std::string> compiled;  // binary cache keys: variants sharing a source compiled it once
  for (const auto& r : s.rows) {
    if (!rows.count(r.family)) order.push_back(r.family);
    Row& row = rows[r.family];
    const Resources res = resources_of(r);
    ++row.variants;
    row.failed += r.failure.empty() ? 0 : 1;
    row.spilling += res.spills > 0 ? 1 : 0;
    row.cached += r.result.cache_hit ? 1 : 0;
    if (r.result.ok) {
      row.min_regs = std::min(row.min_regs, res.registers);
      row.max_regs = std::max(row.max_regs, res.registers);
    }
    row.max_smem = std::max(row.max_smem, res.smem);
    if (compiled.insert(r.result.key).second) row.compile_s += r.result.compile_ms * 1e-3;  // once per source
  }
  Table table({{"family"},
               {"variants", true},
               {"failed", true},
               {"invalid (constraints)", true},
               {"registers", true},
               {"spilling", true},
               {"max static smem", true},
               {"compile s", true},
               {"cached", true}});
  for (const auto& name : order) {
    const Row& row = rows[name];
    if (failures_only && row.failed == 0) continue;
    const auto invalid = s.invalid_by_family.count(name) ? s.invalid_by_family.at(name) : 0;
    table.add({name, std::to_string(row.variants), std::to_string(row.failed), std::to_string(invalid),
               row.max_regs ? fmt::format("{}-{}", row.min_regs, row.max_regs) : "-", std::to_string(row.spilling),
               std::to_string(row.max_smem), fmt::format("{:.1f}", row.compile_s), std::to_string(row.cached)});
  }
  return table.rows() ? table.str() : "";
}

/// One row per variant; cached ones say so.
std::string variant_table(const tuner::CompileCheckSummary& s, bool failures_only) {
  Table table({{"family"}, {"problem"}, {"config"}, {"regs", true}, {"spills", true}, {"static smem", true},
               {"ms", true}, {"status"}});
  for (const auto& r : s.rows) {
    if (failures_only && r.failure.empty()) continue;
    const Resources res = resources_of(r);
    const std::string status = !r.failure.empty() ? "FAIL" : r.result.cache_hit ? "ok (cached)" : "ok";
    table.add({r.family, r.problem.key(), r.config.str() + (r.is_default ? " (default)" : ""),
               std::to_string(res.registers), std::to_string(res.spills), std::to_string(res.smem),
               fmt::format("{:.1f}", r.result.compile_ms), status});
  }
  return table.rows() ? table.str() : "";
}

}  // namespace

void add_compile_command(CLI::App& app, Global& global) {
  struct Opts {
    std::vector<std::string> families;
    tuner::CompileCheckOptions check;
    bool all = false;
    std::uint64_t sample = 0;
    bool quiet = false;
    bool verbose = false;
    bool no_cache = false;
    std::vector<std::string> specs;
  };
  auto opts = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "compile", "Compile variants with NVRTC and report registers, spills, shared memory (no GPU needed)");
  cmd->add_option("--family", opts->families,
                  "Families to compile (repeatable; default: every family, none where --spec is given), " +
                      family_choices());
  cmd->add_option("--spec", opts->specs, spec_help("to compile (repeatable; with --family, both are compiled)"))
      ->check(input_file());
  cmd->add_option("--arch", opts->check.arch, "Target: sm_80, sm_86, sm_89, sm_90, sm_90a")->capture_default_str();
  auto* all = cmd->add_flag("--all", opts->all, "Every valid point of every space (default: the default configs only)");
  auto* sample = cmd->add_option("--sample", opts->sample,
                                 "A seeded sample of N valid configs per family and problem class, beside the "
                                 "defaults (every one where fewer are valid)")
                     ->check(integer_at_least(1))
                     ->default_str("none")
                     ->excludes(all);
  cmd->add_option("--seed", opts->check.seed, "Seed of --sample")
      ->check(integer_at_least(0))
      ->capture_default_str()
      ->needs(sample);
  cmd->add_option("--threads", opts->check.threads, "Parallel compilations")
      ->check(thread_count())
      ->default_str("KTUNE_COMPILE_THREADS, else cores");
  auto* quiet =
      cmd->add_flag("--quiet", opts->quiet, "Print only failures and the summary line (progress still on stderr)");
  cmd->add_flag("--verbose,-v", opts->verbose, "One row per variant instead of one per family")->excludes(quiet);
  cmd->add_flag("--no-cache", opts->no_cache, "Ignore the on-disk binary cache");
  cmd->callback([opts, &global] {
    opts->check.which = opts->all ? tuner::CompileCheckOptions::Which::kAll
                        : opts->sample ? tuner::CompileCheckOptions::Which::kSample
                                       : tuner::CompileCheckOptions::Which::kDefaults;
    opts->check.sample = opts->sample;
    templates::DeviceLimits::for_arch(opts->check.arch);  // rejects an unknown arch before any work
    if (opts->check.threads == 0) env::compile_threads();  // and a bad KTUNE_COMPILE_THREADS, in one line
    env::cuda_include_dir();                                // and a KTUNE_CUDA_INCLUDE that is no folder
    std::vector<const templates::Family*> families;
    for (const auto& name : distinct_list(opts->families, "--family"))
      families.push_back(&templates::find_family(name));
    for (const auto& spec : opts->specs) families.push_back(&family_arg("", spec));
    ProgressLine progress;
    progress.update("compiling for " + opts->check.arch + "...");
    opts->check.progress = [&](std::size_t done, std::size_t total, std::size_t cached) {
      progress.update(fmt::format("compiling for {}: {} of {} sources ({} cached)", opts->check.arch, done, total,
                                  cached));
    };
    const tuner::Compiler compiler(!opts->no_cache);
    // Each binary goes into the cache as it is compiled, whole (written atomically): a stop loses none of them,
    // where the cache's folder can be written (asked now: a stop's words are ready before it comes).
    bool keeps = !opts->no_cache;
    try {
      if (keeps) writable_target(std::filesystem::path(compiler.cache_dir()) / "probe.cubin", "binary cache");
    } catch (const Error&) {
      keeps = false;
    }
    const StopSignals stop_signals(false, nullptr,
                                   opts->no_cache ? "\nktune: stopped at once (--no-cache: nothing compiled is kept)\n"
                                   : keeps        ? "\nktune: stopped at once: the variants compiled so far are kept "
                                                    "in the binary cache, and the same command goes on from them\n"
                                                  : "\nktune: stopped at once (the binary cache's folder cannot be "
                                                    "written: nothing compiled is kept)\n");
    const auto s = tuner::compile_check(families, opts->check, compiler);
    progress.finish();
    if (global.json) {
      nlohmann::json j = {{"summary", s.line()}, {"failures", s.failures}, {"variants", s.rows.size() - s.not_compiled},
                          {"invalid", s.invalid}, {"not_stored", tuner::not_stored_so_far().compiles}};
      for (const auto& r : s.rows) {
        nlohmann::json row = {{"family", r.family}, {"problem", r.problem.to_json()}, {"config", r.config.to_json()},
                              {"default", r.is_default}, {"ok", r.failure.empty()}, {"failure", r.failure},
                              {"compile_ms", r.result.compile_ms}, {"cached", r.result.cache_hit}};
        for (const auto& k : r.result.kernels)
          row["kernels"].push_back({{"name", k.name_expression}, {"registers", k.registers},
                                    {"spill_bytes", k.spill_bytes()}, {"static_smem", k.static_smem_bytes}});
        if (!r.result.ok) row["log"] = r.result.log;
        j["rows"].push_back(row);
      }
      std::cout << dump_json(j, 1) << "\n";
    } else {
      std::cout << (opts->verbose ? variant_table(s, opts->quiet) : family_table(s, opts->quiet));
      for (const auto& r : s.rows)
        if (!r.failure.empty())
          std::cout << fmt::format("FAIL {} {} {}: {}\n{}\n", r.family, r.problem.key(), r.config.str(), r.failure,
                                   r.result.log.substr(0, 2000));
      std::cout << s.line() << "\n";
    }
    if (s.failures) throw_error(ErrorKind::kCheckFailed, s.line());
  });
}

}  // namespace ktune::cli
