// `ktune compile`: render and compile variants with NVRTC (no GPU needed),
// print the resource table and a summary line; exit 1 on any failure.
#include <fmt/format.h>

#include <iostream>

#include "base/error.hpp"
#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "tuner/compile/compile_check.hpp"

namespace ktune::cli {

void add_compile_command(CLI::App& app, Global& global) {
  struct Opts {
    std::vector<std::string> families;
    tuner::CompileCheckOptions check;
    bool all = false;
    std::uint64_t sample = 0;
    bool quiet = false;
    bool no_cache = false;
  };
  auto opts = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "compile", "Compile variants with NVRTC and report registers, spills, shared memory (no GPU needed)");
  cmd->add_option("--family", opts->families, "Families to compile (repeatable; default: every family), " + family_choices());
  cmd->add_option("--arch", opts->check.arch, "Target: sm_80, sm_86, sm_89, sm_90, sm_90a")->capture_default_str();
  cmd->add_flag("--all", opts->all, "Every valid point of every space (default: the default configs only)");
  cmd->add_option("--sample", opts->sample, "A seeded sample of N configs per family and problem class")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seed", opts->check.seed, "Seed of --sample")->capture_default_str();
  cmd->add_option("--threads", opts->check.threads, "Parallel compilations (default: KTUNE_COMPILE_THREADS or cores)")
      ->check(thread_count());
  cmd->add_flag("--quiet", opts->quiet, "Print only failures and the summary line");
  cmd->add_flag("--no-cache", opts->no_cache, "Ignore the on-disk binary cache");
  cmd->callback([opts, &global] {
    KTUNE_REQUIRE(!(opts->all && opts->sample), "--all and --sample exclude each other");
    opts->check.which = opts->all ? tuner::CompileCheckOptions::Which::kAll
                        : opts->sample ? tuner::CompileCheckOptions::Which::kSample
                                       : tuner::CompileCheckOptions::Which::kDefaults;
    opts->check.sample = opts->sample;
    templates::DeviceLimits::for_arch(opts->check.arch);  // rejects an unknown arch before any work
    std::vector<const templates::Family*> families;
    for (const auto& name : opts->families) families.push_back(&templates::find_family(name));
    std::cerr << "compiling for " << opts->check.arch << "...\n";
    const tuner::Compiler compiler(!opts->no_cache);
    const auto s = tuner::compile_check(families, opts->check, compiler);
    if (global.json) {
      nlohmann::json j = {{"summary", s.line()}, {"failures", s.failures}, {"variants", s.rows.size()}};
      for (const auto& r : s.rows) {
        nlohmann::json row = {{"family", r.family}, {"problem", r.problem.to_json()}, {"config", r.config.to_json()},
                              {"default", r.is_default}, {"ok", r.failure.empty()}, {"failure", r.failure},
                              {"compile_ms", r.result.compile_ms}};
        for (const auto& k : r.result.kernels)
          row["kernels"].push_back({{"name", k.name_expression}, {"registers", k.registers},
                                    {"spill_bytes", k.spill_bytes()}, {"static_smem", k.static_smem_bytes}});
        if (!r.result.ok) row["log"] = r.result.log;
        j["rows"].push_back(row);
      }
      std::cout << j.dump(1) << "\n";
    } else {
      std::cout << fmt::format("| {:<13} | {:<26} | {:<75} | {:>4} | {:>6} | {:>6} | {:>8} | {:<6} |\n", "family",
                               "problem", "config", "regs", "spills", "smem", "ms", "status");
      std::cout << fmt::format("|{:-<15}|{:-<28}|{:-<77}|{:->6}|{:->8}|{:->8}|{:->10}|{:-<8}|\n", "", "", "", "",
                               "", "", "", "");
      for (const auto& r : s.rows) {
        if (opts->quiet && r.failure.empty()) continue;
        int regs = 0, spills = 0, smem = 0;
        for (const auto& k : r.result.kernels) {
          regs = std::max(regs, k.registers);
          spills = std::max(spills, k.spill_bytes());
          smem = std::max(smem, k.static_smem_bytes);
        }
        std::cout << fmt::format("| {:<13} | {:<26} | {:<75} | {:>4} | {:>6} | {:>6} | {:>8.1f} | {:<6} |\n",
                                 r.family, r.problem.key(), r.config.str() + (r.is_default ? " (default)" : ""), regs,
                                 spills, smem, r.result.compile_ms, r.failure.empty() ? "ok" : "FAIL");
        if (!r.failure.empty()) std::cout << "    " << r.failure << ": " << r.result.log.substr(0, 2000) << "\n";
      }
      std::cout << s.line() << "\n";
    }
    if (s.failures) throw_error(ErrorKind::kCheckFailed, s.line());
  });
}

}  // namespace ktune::cli
