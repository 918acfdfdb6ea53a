// `ktune tune`: search a family's space for one problem on the GPU (or the
// emulation backend, to check the loop), each variant in a worker process that
// is restarted when a variant crashes or hangs; log every result as it
// arrives, and put the winner into a tuned cache.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <set>

#include "base/env.hpp"
#include "base/error.hpp"
#include "base/files.hpp"
#include "base/json_output.hpp"
#include "cache/store.hpp"
#include "cli/commands.hpp"
#include "cli/model_args.hpp"
#include "cli/options.hpp"
#include "cli/progress.hpp"
#include "cli/stop_signals.hpp"
#include "cli/table.hpp"
#include "cli/tune_report.hpp"
#include "model/step_kernels.hpp"
#include "search/kernel_tuner_format.hpp"
#include "search/stop.hpp"
#include "search/strategy.hpp"
#include "spec/spec_family.hpp"
#include "tuner/cuda/gpu_marks.hpp"
#include "tuner/run/emu_runner.hpp"
#include "tuner/run/isolated_runner.hpp"
#include "tuner/session/session.hpp"
#include "tuner/session/tuned_kernels.hpp"

namespace ktune::cli {
namespace {

constexpr std::size_t kTop = 5;  // configs in the table at the end of a session

/// " (12 min so far; about 40 min left at that pace)": a --model run's time, `done` of its `total` kernels
/// tuned since `start`, and what the rest would take were each as long as the mean so far.
std::string run_pace(std::chrono::steady_clock::time_point start, std::size_t done, std::size_t total) {
  const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return fmt::format(" ({} so far; about {} left at that pace)", format_duration(spent),
                     format_duration(spent / static_cast<double>(done) * static_cast<double>(total - done)));
}

// Whether a cache entry's config reads and sums in a fixed order.
bool deterministic_config(const templates::Family& family, const nlohmann::json& config) {
  try {
    return family.deterministic(Config::from_json(config));
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

void add_tune_command(CLI::App& app, Global& global) {
  struct Opts {
    std::string family, spec, problem, parameters, cache = "tuned.json", log, backend = "gpu", dtype = "f32";
    ModelArgs model;
    tuner::TuneOptions tune;
    double timeout_s = 120;
    int repetitions = 0;  // 0: adaptive
    std::string shard, export_kt;
    bool no_isolate = false;
    std::int64_t accumulate = 1;  // with --model: micro-batches per optimizer step
  };
  auto opts = std::make_shared<Opts>();
  opts->tune.strategy = tuner::kDefaultStrategy;
  opts->tune.budget = tuner::kDefaultBudget;
  auto* cmd = app.add_subcommand("tune", "Tune a kernel family for one problem (--family, --problem), or every kernel "
                                         "one training step of a model needs (--model, --ctx, --dtype), on the GPU, "
                                         "and cache the winners");
  cmd->add_option("--family", opts->family,
                  "Kernel family (`ktune render --family F --space` shows its space), " + family_choices());
  cmd->add_option("--spec", opts->spec, spec_help())->check(input_file());
  cmd->add_option("--problem", opts->problem,
                  std::string(kProblemHelp) + "; required with --family; with --spec, default: the spec's first "
                                              "problem; not with --model, whose --ctx, --batch and --dtype shape its "
                                              "kernels")
      ->check(json_text());
  cmd->add_option("--parameters", opts->parameters, kParametersHelp)->check(json_text());
  add_model_options(cmd, opts->model, {.ctx = 256, .batch = 4});
  cmd->get_option("--model")->default_str("none: give it, or --family or --spec");
  cmd->get_option("--ctx")->description("With --model: context length");
  cmd->get_option("--batch")->description("With --model: batch size");
  cmd->get_option("--threads")
      ->description("CPU threads: on a GPU, one runs the search and the rest compile ahead of it")
      ->default_str("KTUNE_COMPILE_THREADS, else cores");
  cmd->add_option("--dtype", opts->dtype,
                  "With --model: the run's --dtype: f32, tf32 (f32 problems, flash attention), or bf16 (bf16 "
                  "activations, fp32 weights and state); the kernels compiled mode launches at that precision")
      ->check(CLI::IsMember({"f32", "tf32", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--accumulate", opts->accumulate,
                  "With --model: the run's --accumulate, micro-batches per optimizer step: above 1, the gradient "
                  "accumulation's adds (prim_add) are tuned too")
      ->check(integer_at_least(1))
      ->capture_default_str();
  cmd->add_option("--strategy", opts->tune.strategy, "Search strategy, " + strategy_choices())->capture_default_str();
  cmd->add_option("--budget", opts->tune.budget,
                  "When to stop: N evaluations (\"200\"), time (\"90s\", \"15m\"), \"plateau:N\" "
                  "(N evaluations without improvement), or several joined by + (\"200+15m\": whichever comes first); "
                  "\"\" for none (exhaustive's default); with --model, each kernel's (16 kernels of 30s: 8 minutes)")
      ->capture_default_str();
  cmd->add_option("--seed", opts->tune.seed, "Seed of the strategy and the inputs")
      ->check(integer_at_least(0))
      ->capture_default_str();
  cmd->add_option("--cache", opts->cache,
                  "Tuned cache file the winner goes into; a config it holds for the problem is measured in the "
                  "session too, so only a faster one replaces it; one another process writes there meanwhile stays "
                  "where `ktune cache merge` would keep it")
      ->check(output_file())
      ->capture_default_str();
  cmd->add_option("--log", opts->log,
                  "Session log (JSON lines; with --model, a prefix; a folder, existing or ending in /, holds each "
                  "session's log under its default name); `ktune log show` reads it. Without --resume, one "
                  "that holds results is refused, and the default log replaced is kept as "
                  "<family>.<problem>.previous.log (an earlier one there as .previous.2.log, and so on)")
      ->check(output_file())
      ->default_str("$KTUNE_CACHE_DIR/sessions/<family>.<problem>.log");
  cmd->add_flag("--resume", opts->tune.resume,
                "Continue the session in --log instead of starting anew (after a kill, or SIGINT/SIGTERM/SIGHUP/"
                "SIGPIPE, which end a session after its evaluation, its best so far in the cache); a log of another "
                "backend, device or kernel source is refused; another --strategy or --seed goes on from the logged "
                "results, and the log notes it with its first new result; every logged result counts against "
                "--budget; a finished session resumed with nothing new to measure judges its finalists by the times "
                "it logged for them, without timing them again (where noise alone could pick another winner)");
  cmd->add_flag("--deterministic", opts->tune.deterministic,
                "Search only the configs that sum in a fixed order, as a --deterministic run takes (no fp32 atomics: "
                "attention_bwd's dq_atomic 0, embedding_bwd's deterministic 1 to 3), from the one nearest the "
                "default; the winner goes into the cache as the entry's deterministic pick where the entry's config "
                "sums by atomics, else as the entry");
  add_kernel_backend_option(cmd, opts->backend, "checks the whole loop");
  auto* timeout = cmd->add_option("--timeout", opts->timeout_s,
                                  "Seconds one evaluation may take (compile included) before its worker process is "
                                  "killed and the variant marked failed")
                      ->check(finite_in(0, 7 * 24 * 3600, true))
                      ->capture_default_str();
  cmd->add_option("--warmup", opts->tune.run.warmup,
                  "Untimed launches before an evaluation's timed ones (the emulation makes at most 1)")
      ->check(integer_within(0, 1000, "in 0..1000"))
      ->capture_default_str();
  cmd->add_option("--repetitions", opts->repetitions,
                  "Timed launches per evaluation, exactly (the emulation makes at most 3); without it, 10, then more "
                  "until 50 ms of kernel time is measured, at most 200")
      ->check(integer_within(1, 100000, "in 1..100000"))
      ->default_str("auto");
  cmd->add_option("--shard", opts->shard, "i/n: tune only the configs whose space index is i modulo n (for a "
                                          "Slurm array or MPI ranks; merge the caches with `ktune cache merge`); "
                                          "each shard logs apart, and the cache's entry stays unless it measured "
                                          "that entry's config or found a faster one");
  cmd->add_option("--export-kt", opts->export_kt,
                  "Also write this session's evaluations as a Kernel Tuner cache file (.json or .json.gz)")
      ->check(output_file());
  cmd->add_flag("--no-isolate", opts->no_isolate,
                "Run variants in this process (faster start; a crashing variant then ends the session, and no "
                "--timeout can stop a hanging one)")
      ->excludes(timeout);
  cmd->footer("Environment: KTUNE_PRINT=quiet (the result table, how it was measured and where it went: no "
              "progress) | summary (progress and the fastest configs; the default) | all (every evaluation as it "
              "finishes, too).\n\n--json, before or after the subcommand: machine-readable JSON on stdout");
  cmd->callback([opts, cmd, &global] {
    const env::PrintLevel print = env::print_level();  // a bad KTUNE_PRINT stops us before any work
    const bool by_model = cmd->get_option("--model")->count() > 0;
    const bool by_family = !opts->family.empty() || !opts->spec.empty();
    KTUNE_REQUIRE(by_model != by_family,
                  "give either --family with --problem, or --model (with --ctx, --batch, --dtype), or --spec (a kernel "
                  "spec)");
    std::vector<tuner::KernelRequest> requests;
    if (by_model) {
      KTUNE_REQUIRE(opts->parameters.empty(), "--parameters are one kernel's: give them with --family or --spec");
      KTUNE_REQUIRE(opts->problem.empty(), "--problem is one kernel's shape: give it with --family or --spec; the "
                                           "kernels of --model take theirs from --ctx, --batch and --dtype");
      model::RunShape shape = shape_from_args(opts->model);
      shape.micro_batches = opts->accumulate;
      shape.validate();  // a step of batch x micro-batches windows, refused before it overflows
      requests = model::step_kernels(model_from_args(opts->model), shape, model::parse_precision(opts->dtype));
    } else {
      // What shapes a model's kernels says nothing about one family's problem: given, it was ignored.
      const auto refuse = [&](const char* name) {
        KTUNE_REQUIRE(cmd->get_option(name)->count() == 0,
                      fmt::format("{} shapes the kernels of --model; with --family or --spec, --problem gives the "
                                  "shape (its \"dtype\" the precision)",
                                  name));
      };
      for (const char* name : {"--ctx", "--batch", "--dtype", "--accumulate"}) refuse(name);
      for (const char* name : kSizeOptions) refuse(name);
      const auto& family = family_arg(opts->family, opts->spec);  // an unknown family is named first
      KTUNE_REQUIRE(!opts->problem.empty() || !opts->spec.empty(), "--family needs --problem");
      requests.push_back({&family, problem_arg(family, opts->problem)});
      opts->tune.run.scalars = parameters_arg(family, requests.back().problem, opts->parameters);
      const auto* spec_family = dynamic_cast<const spec::SpecFamily*>(&family);
      if (spec_family && opts->backend == "emu") spec_family->require_emulation();
    }
    if (opts->tune.strategy == "exhaustive" && cmd->get_option("--budget")->count() == 0) opts->tune.budget.clear();
    search::require_strategy(opts->tune.strategy);  // reject an unknown strategy or budget before any GPU work
    if (!opts->tune.budget.empty()) search::parse_budget(opts->tune.budget);
    if (cmd->get_option("--shard")->count() > 0) {  // an empty one too: refused, as not i/n
      // Digits only (sscanf's %llu took "-2" as 2^64 - 2).
      std::uint64_t i = 0, n = 0;
      const std::string& text = opts->shard;
      const char* const last = text.data() + text.size();
      const auto first = std::from_chars(text.data(), last, i);
      const bool slash = first.ec == std::errc() && first.ptr != last && *first.ptr == '/';
      const auto second = slash ? std::from_chars(first.ptr + 1, last, n) : first;
      KTUNE_REQUIRE(slash && second.ec == std::errc() && second.ptr == last && n >= 1 && i < n,
                    "--shard must be i/n with 0 <= i < n, got '" + opts->shard + "'");
      opts->tune.shard_index = i;
      opts->tune.shard_count = n;
    }
    KTUNE_REQUIRE(requests.size() == 1 || opts->export_kt.empty(), "--export-kt takes one --family, not --model");
    // A --log naming a folder (an existing one, or a path ending in /) holds the logs under their default names.
    const bool log_folder = !opts->log.empty() && (opts->log.back() == '/' || std::filesystem::is_directory(opts->log));
    // With --model, --log is a prefix of the sessions' logs, not a file.
    require_distinct_files({{"--spec", opts->spec}},
                           {{"--cache", opts->cache},
                            {"--log", requests.size() == 1 && !log_folder ? opts->log : std::string()},
                            {"--export-kt", opts->export_kt}});
    // Logs go under the cache folder unless --log says where (a prefix with --model).
    const auto log_path_of = [&](const tuner::KernelRequest& r) {
      const std::string default_log =
          tuner::default_log_path(*r.family, r.problem, opts->tune.shard_index, opts->tune.shard_count);
      const std::string name = std::filesystem::path(default_log).filename().string();
      return opts->log.empty()      ? default_log
             : log_folder           ? (std::filesystem::path(opts->log) / name).string()
             : requests.size() == 1 ? opts->log
                                    : opts->log + "." + name;
    };
    // A log path that cannot be written is refused before the first search (each session checks its own too).
    if ((requests.size() > 1 || log_folder) && !opts->log.empty())
      for (const auto& r : requests) writable_target(log_path_of(r), "--log");
    // Without --resume, a --log prefix one of whose kernels' logs holds results would be refused at that kernel,
    // after the search of those before it: refused here, before any.
    if (requests.size() > 1 && !opts->log.empty() && !opts->tune.resume)
      for (const auto& r : requests)
        KTUNE_REQUIRE(!tuner::log_holds_results(log_path_of(r)),
                      fmt::format("--log {}: {} holds the results of a session of {} on {}: give --resume to go on "
                                  "from the logs there, or another --log (or remove them) to start anew",
                                  opts->log, log_path_of(r), r.family->name(), r.problem.key()));
    cache::CacheFile cache_file(opts->cache);
    const std::vector<cache::Entry> cached = cache_file.load();  // a corrupt cache file stops us before the search
    cache_file.check_writable();  // so does one the winner could not be written to
    if (!opts->export_kt.empty()) {
      KTUNE_REQUIRE(opts->export_kt.ends_with(".json") || opts->export_kt.ends_with(".json.gz"),
                    fmt::format("--export-kt {}: a Kernel Tuner cache file is .json or .json.gz", opts->export_kt));
      writable_target(opts->export_kt, "--export-kt");
      // An earlier export is replaced; any other file (a tuned cache, notes) would be lost.
      if (std::error_code ec; std::filesystem::file_size(opts->export_kt, ec) > 0 && !ec) {
        try {
          search::read_kernel_tuner_cache(opts->export_kt);
        } catch (const Error& e) {
          throw_error(ErrorKind::kInvalidInput,
                      fmt::format("--export-kt {}: the file is there and no Kernel Tuner cache ({}), and the export "
                                  "would replace it; give another path",
                                  opts->export_kt, e.what()));
        }
      }
    }
    opts->tune.run.time = true;
    if (opts->repetitions > 0) {
      opts->tune.run.min_repetitions = opts->tune.run.max_repetitions = opts->repetitions;
      opts->tune.run.min_seconds = 0;
    }
    // One thread stays with the runner, the rest compile ahead of it: --threads, else KTUNE_COMPILE_THREADS (a bad
    // one refused here, in one line), else cores.
    const unsigned threads = opts->model.threads ? opts->model.threads : env::compile_threads();
    opts->tune.compile_ahead_threads = std::max(1u, threads) - 1;
    std::function<std::unique_ptr<tuner::Runner>()> make_inner = [backend = opts->backend] {
      return tuner::make_runner(backend == "emu");
    };
    tuner::IsolationOptions isolation;
    isolation.timeout_s = opts->timeout_s;
    for (const auto& r : requests)  // a kernel spec's family is not registered: the worker gets it by address
      if (dynamic_cast<const spec::SpecFamily*>(r.family)) isolation.extra_families.push_back(r.family);
    auto runner = opts->no_isolate ? make_inner() : tuner::make_isolated_runner(make_inner, isolation);
    // A kernel none of whose configs sums in a fixed order cannot be tuned so: refused before any search.
    if (opts->tune.deterministic)
      for (const auto& r : requests) tuner::session_default(*r.family, r.problem, runner->device(), true);

    const bool emulated = opts->backend == "emu";
    nlohmann::json results = nlohmann::json::array();
    Table table({{"family"}, {"problem"}, {"best config"}, {emulated ? "host ms (emulated)" : "time ms", true},
                 {"p20-p80 ms", true}, {emulated ? "vs default (emulated host time)" : "vs default", true},
                 {"evaluations", true}, {"pruned", true}, {"failed", true}, {"tied finalists", true},
                 {"stopped by"}});
    std::string tops;
    std::string method;
    std::vector<std::string> logs, previous_logs, failed;
    // Winners not written: what the cache held and the session did not measure (another process wrote it
    // meanwhile, or a stop or another shard left it unmeasured) was better.
    std::size_t kept_others = 0;
    // A stop signal ends the session after its evaluation under way: its best so far goes into the cache, the
    // kernels after it are left for --resume.
    // The handler writes it as it is: made before it is installed, alive while it is.
    const std::string stopping =
        opts->no_isolate
            ? "\nktune: stopping after this evaluation; the best so far goes into the cache (again: stop at once)\n"
            : fmt::format("\nktune: stopping after this evaluation (within --timeout, {:g} s); the best so far goes "
                          "into the cache (again: stop at once)\n",
                          opts->timeout_s);
    StopSignals stop_signals(true, stopping.c_str(), nullptr,
                             "\nktune: stopped at once: the cache is left as it was; the session log holds every "
                             "evaluation that ended, and the same command with --resume goes on from them\n");
    const auto run_start = std::chrono::steady_clock::now();
    std::set<std::string> neighbours;  // other processes on the GPU, each named once
    for (std::size_t i = 0; i < requests.size() && !stop_signals.caught(); ++i) {
      // A finished kernel's tables are printed as the next one starts: a long --model run shows its winners as
      // they land, and one killed midway leaves them on the screen.
      std::cout << tops << std::flush;
      tops.clear();
      const auto& family = *requests[i].family;
      const auto& problem = requests[i].problem;
      tuner::TuneOptions tune = opts->tune;
      tune.should_stop = [&stop_signals] { return stop_signals.caught() != 0; };
      tune.on_note = [](const std::string& note) { std::cerr << "note: " << note << "\n"; };
      tune.log_path = log_path_of(requests[i]);
      tune.default_log = opts->log.empty();
      if (tune.resume && print != env::PrintLevel::kQuiet && !std::filesystem::exists(tune.log_path))
        std::cerr << fmt::format("note: nothing to resume: {} does not exist; a new session starts there\n",
                                 tune.log_path);
      // What the cache holds for this problem competes with the session's configs.
      tuner::take_incumbent(tune, cached, family, problem, runner->device());
      if (requests.size() > 1 && print != env::PrintLevel::kQuiet)
        std::cerr << fmt::format("[{}/{}] {} on {}{}\n", i + 1, requests.size(), family.name(), problem.key(),
                                 i == 0 ? "" : run_pace(run_start, i, requests.size()));
      // The speed-ups are over the config measured as the default: say when it stands in for an invalid one.
      try {
        const Config def = tuner::session_default(family, problem, runner->device(), tune.deterministic);
        if (const auto invalid = invalid_default(family, problem, runner->device(), def))
          std::cerr << fmt::format("note: {} on {}: the default {} is not valid on {} ({}); {} stands in for it, and "
                                   "the speed-ups are over it\n",
                                   family.name(), problem.key(), invalid->declared.str(), runner->device().arch,
                                   invalid->why, def.str());
      } catch (const Error&) {  // no valid config: the session says so
      }
      ProgressLine line;
      std::size_t evaluated = 0;
      // "69 valid configs (160 points)": what a search can measure, of the whole space.
      const auto of_points = [&](std::uint64_t valid) {
        return fmt::format("{} valid config{} ({} points)", valid, valid == 1 ? "" : "s", family.space().size());
      };
      // Each other process on the GPU, once, as a measurement of this session (not a resumed log's) first names it.
      const auto warn_shared = [&](const tuner::Record& r) {
        if (r.resumed || !r.result.timing) return;
        for (const auto& other : r.result.timing->shared_with)
          if (neighbours.insert(other).second)
            line.note(tuner::shared_gpu_warning(other, "tune") +
                      "; the session log names it beside each time (shared_with)");
      };
      auto progress = [&](const tuner::Record& r, const search::Progress& p) {
        ++evaluated;
        warn_shared(r);
        if (print == env::PrintLevel::kQuiet) return;
        if (print == env::PrintLevel::kAll) {
          std::cerr << evaluation_line(evaluated, evaluation_of(r), emulated) << "\n";
          return;
        }
        const std::string eta = p.eta_s >= 0 ? "ETA " + format_duration(p.eta_s) : "ETA ?";
        line.update(fmt::format("[{:>5} evaluated of {}, {} failed] {}", p.state->evaluations,
                                of_points(p.valid_points), p.state->failures, tuner::standing(r, p, eta)));
      };
      // A write that fails mid-session (a full disk: the log, a compiled binary) ends it; the log keeps what ran.
      const auto summary = [&] {
        try {
          return tuner::tune(family, problem, *runner, tune, progress);
        } catch (const Error& e) {
          if (e.kind() != ErrorKind::kIo || tune.log_path.empty() || !std::filesystem::exists(tune.log_path)) throw;
          throw_error(ErrorKind::kIo, fmt::format("{}; {} holds the evaluations before it: the same command with "
                                                  "--resume goes on from them",
                                                  e.what(), tune.log_path));
        }
      }();
      for (const auto& r : summary.finalists) warn_shared(r);  // timed again after the search
      logs.push_back(summary.log_path);
      if (!summary.previous_log.empty()) previous_logs.push_back(summary.previous_log);
      // The last line says it ended, not an ETA (also where the log's results had spent the budget).
      if ((evaluated > 0 || summary.evaluations > 0) && print == env::PrintLevel::kSummary) {
        const auto* best = summary.best && summary.best->result.timing ? &*summary.best->result.timing : nullptr;
        // The winner as timed again beside the finalists: on a noisy host it may be slower than the best the
        // search saw, which the winner rule did not trust.
        line.update(fmt::format("[{:>5} evaluated of {}, {} failed] winner {}, done in {} ({}){}",
                                summary.evaluations, of_points(summary.valid_points), summary.failures,
                                best ? fmt::format("{:.4f} ms", best->median_ms) : "none",
                                format_duration(summary.seconds) +
                                    (summary.compile_seconds >= 0.05 * summary.seconds && summary.seconds >= 1
                                         ? ", " + format_duration(summary.compile_seconds) + " of it compiling"
                                         : ""),
                                summary.stopped_by,
                                summary.resumed == 0 ? ""
                                : summary.finalists_from_log
                                    ? fmt::format("; {} of them read from the log, and the finalists as its finished "
                                                  "session timed them",
                                                  summary.resumed)
                                    : fmt::format("; {} of them read from the log", summary.resumed)));
      }
      line.finish();
      // A spec whose restrictions or geometry leave points out (a grid that is not whole): how many, and where
      // to read why, which no evaluated config says.
      if (dynamic_cast<const spec::SpecFamily*>(&family) && summary.valid_points < family.space().size() &&
          print != env::PrintLevel::kQuiet)
        std::cerr << fmt::format("note: {} of the {} points are not valid for {} on {}; `ktune render --space "
                                 "--spec {} --problem '{}'` says why\n",
                                 family.space().size() - summary.valid_points, family.space().size(), problem.key(),
                                 runner->device().arch, opts->spec, problem.to_json().dump());
      SessionView view{&family, problem, opts->backend, runner->device().peak_bandwidth_gbs, {}, {},
                       tuner::session_default(family, problem, runner->device(), tune.deterministic)};
      for (const auto& r : summary.records) view.evaluations.push_back(evaluation_of(r));
      if (summary.best) view.winner = summary.best->config.str();
      if (print != env::PrintLevel::kQuiet && !global.json) {
        const auto working = std::count_if(view.evaluations.begin(), view.evaluations.end(),
                                           [](const Evaluation& e) { return e.ok; });
        if (working > 0) {  // a session none of whose configs ran has no fastest: its failures say why
          tops += fmt::format("{} on {}, fastest {} of {} evaluated, as timed in the search:\n", family.name(),
                              problem.key(), std::min<std::size_t>(kTop, working), summary.records.size());
          tops += top_table(view, kTop);
        }
        if (const std::string failures = failure_table(view.evaluations); !failures.empty())
          tops += fmt::format("{} on {}, the configs that failed, by kind (KTUNE_PRINT=all prints each):\n{}",
                              family.name(), problem.key(), failures);
      }
      if (!opts->export_kt.empty()) {  // failures too: Kernel Tuner's caches keep them
        search::KernelTunerHeader header;
        header.device_name = runner->device().name;
        header.kernel_name = family.name();
        header.problem_size = problem.to_json()["dims"];
        search::write_kernel_tuner_cache(opts->export_kt, family.space(), summary.records, header);
      }
      if (print != env::PrintLevel::kQuiet && !global.json)
        for (const auto& d : summary.disqualified)
          tops += fmt::format("{} on {}: finalist {} failed when timed again beside the others ({}); it wins nothing, "
                              "whatever the search measured\n",
                              family.name(), problem.key(), d.config.str(), d.result.failure);
      if (!summary.best) {
        failed.push_back(fmt::format("{} on {} ({})", family.name(), problem.key(),
                                     !summary.disqualified.empty() ? "every finalist failed when timed again"
                                     : view.evaluations.empty()    ? "nothing measured"
                                                                   : failure_digest(view.evaluations)));
        continue;
      }
      // A deterministic session's winner goes beside a faster one by atomics, as its deterministic pick.
      bool beside = false;
      std::optional<cache::Entry> other;  // an entry another process wrote meanwhile, kept over the winner
      std::optional<cache::DeterministicPick> other_pick;  // and such a deterministic pick
      try {
        const cache::Entry entry = tuner::cache_entry(family, problem, runner->device(), summary);
        // What the winner competed with: the entries read at the start, less this key's where its config was not
        // measured (a stop came first, or it lies in another shard): that one stays unless the winner is faster.
        std::vector<cache::Entry> seen = cached;
        if (!summary.incumbent_competed)
          std::erase_if(seen, [&](const cache::Entry& e) { return e.key.identity() == entry.key.identity(); });
        if (tune.deterministic) {
          const auto put = cache_file.put_deterministic_pick(
              entry, seen, [&](const nlohmann::json& config) { return !deterministic_config(family, config); });
          beside = put.beside;
          other_pick = put.kept;
        }
        if (!beside) other = cache_file.put_winner(entry, seen);
        if (other || other_pick) ++kept_others;
      } catch (const Error& e) {  // a full disk: the winner and where the measurements are kept
        if (e.kind() != ErrorKind::kIo) throw;
        throw_error(ErrorKind::kIo,
                    fmt::format("{}; the winner of {} on {} is {} at {:.4f} ms, and {} holds every evaluation: the "
                                "same command with --resume takes them from it (timing only the finalists again) and "
                                "writes the winner",
                                e.what(), family.name(), problem.key(), summary.best->config.str(),
                                summary.best->result.timing->median_ms, summary.log_path));
      }
      const auto& t = *summary.best->result.timing;
      method = t.method;
      if (!summary.kept_note.empty() && print != env::PrintLevel::kQuiet && !global.json)
        tops += fmt::format("{} on {}: {}\n", family.name(), problem.key(), summary.kept_note);
      const std::string unmeasured = summary.incumbent_competed
                                         ? "written by another process during this session, which did not measure it"
                                         : "which this session did not measure (it stopped first, or the config "
                                           "lies in another shard)";
      if (other && print != env::PrintLevel::kQuiet && !global.json)
        tops += fmt::format("{} on {}: {} holds {} at {:.4f} ms (p20-p80 {:.4f}-{:.4f}), {}; it is kept, as `ktune "
                            "cache merge` keeps the better measured of two, and this session's winner is not written\n",
                            family.name(), problem.key(), opts->cache, other->config.dump(), other->time_ms,
                            other->p20_ms, other->p80_ms, unmeasured);
      if (other_pick && print != env::PrintLevel::kQuiet && !global.json)
        tops += fmt::format("{} on {}: {} holds the deterministic pick {} at {:.4f} ms, {}; it is kept, the faster of "
                            "the two, and this session's winner is not written\n",
                            family.name(), problem.key(), opts->cache, other_pick->config.dump(),
                            other_pick->time_ms, unmeasured);
      else if (beside && print != env::PrintLevel::kQuiet && !global.json)
        tops += fmt::format("{} on {}: the winner goes into {} as the deterministic pick beside the entry's config, "
                            "which sums by atomics\n",
                            family.name(), problem.key(), opts->cache);
      const auto& fixed = summary.best_deterministic;
      if (fixed && print != env::PrintLevel::kQuiet && !global.json)
        tops += fmt::format("{} on {}: the winner sums by atomics, in no fixed order; a --deterministic run takes {} "
                            "at {:.4f} ms ({:.2f}x the winner's time), the fastest measured that does not\n",
                            family.name(), problem.key(), fixed->config.str(), fixed->result.timing->median_ms,
                            fixed->result.timing->median_ms / t.median_ms);
      results.push_back({{"family", family.name()}, {"problem", problem.to_json()},
                         {"best_config", summary.best->config.to_json()}, {"time_ms", t.median_ms},
                         {"p20_ms", t.p20_ms}, {"p80_ms", t.p80_ms},
                         {"speedup_over_default", summary.speedup_over_default()}, {"emulated", emulated},
                         {"default_config", view.default_of().to_json()},
                         {"default_time_ms", summary.default_run && summary.default_run->result.timing
                                                 ? nlohmann::json(summary.default_run->result.timing->median_ms)
                                                 : nlohmann::json()},
                         {"finalists", tuner::finalists_json(summary)},
                         {"disqualified", tuner::disqualified_json(summary)}, {"tied", summary.tied},
                         {"deterministic_search", tune.deterministic},
                         {"written_as", other || other_pick ? "none" : beside ? "deterministic pick" : "entry"},
                         {"deterministic", fixed ? nlohmann::json{{"config", fixed->config.to_json()},
                                                                  {"time_ms", fixed->result.timing->median_ms}}
                                                 : nlohmann::json()},
                         {"pruned", summary.pruned},
                         {"stopped_by", summary.stopped_by}, {"method", t.method},
                         {"kept_note",
                          summary.kept_note.empty() ? nlohmann::json() : nlohmann::json(summary.kept_note)},
                         {"top", top_json(view, kTop)},
                         {"evaluations", summary.evaluations}, {"failures", summary.failures},
                         {"failure_kinds", failure_json(view.evaluations)},
                         {"seconds", summary.seconds}, {"compile_seconds", summary.compile_seconds},
                         {"cache", opts->cache}, {"log", summary.log_path},
                         {"previous_log",
                          summary.previous_log.empty() ? nlohmann::json() : nlohmann::json(summary.previous_log)}});
      table.add({family.name(), problem.key(), summary.best->config.str(), fmt::format("{:.4f}", t.median_ms),
                 fmt::format("{:.4f}-{:.4f}", t.p20_ms, t.p80_ms),
                 fmt::format("{:.2f}x", summary.speedup_over_default()),
                 std::to_string(summary.evaluations), std::to_string(summary.pruned),
                 std::to_string(summary.failures - summary.pruned), std::to_string(summary.tied), summary.stopped_by});
    }
    if (global.json) {
      // One session: its object, or no JSON where it found no winner (the error below says why), not an empty
      // array in place of the object. Several (--model): an array of the winners found.
      if (requests.size() > 1) std::cout << dump_json(results, 2) << "\n";
      else if (!results.empty()) std::cout << dump_json(results[0], 2) << "\n";
    } else {
      std::cout << tops << (results.empty() ? "" : table.str());
      if (!method.empty()) std::cout << "measured: " << method << "\n";
      if (emulated)
        std::cout << "emulated: times and speed-ups are host wall times of the emulation, not GPU results\n";
      // One log, or several: the --log prefix's, else the cache folder's sessions/.
      const std::string folder = std::filesystem::path(logs[0]).parent_path().string() + "/";
      const std::string where = logs.size() == 1                  ? logs[0]
                                : opts->log.empty() || log_folder ? folder
                                                                  : opts->log + ".*";
      const std::string written =
          results.empty() ? (std::filesystem::exists(opts->cache)
                                 ? fmt::format("no winner: {} is left as it was", opts->cache)
                                 : fmt::format("no winner: nothing written to {}", opts->cache))
                          : fmt::format("{} winner{} written to {}", results.size() - kept_others,
                                        results.size() - kept_others == 1 ? "" : "s", opts->cache);
      const std::string others =
          kept_others == 0 ? ""
                           : fmt::format(" ({} kept the better entry the cache held, which the session did not "
                                         "measure)",
                                         kept_others);
      std::cout << fmt::format("{}{}; session log{} {}\n", written, others, logs.size() == 1 ? "" : "s", where);
      if (!previous_logs.empty())
        std::cout << fmt::format("the previous session's log{} kept as {}\n", previous_logs.size() == 1 ? "" : "s",
                                 fmt::join(previous_logs, ", "));
      if (logs.size() == 1)
        std::cout << "read it again with: ktune log show " << logs[0]
                  << (opts->spec.empty() ? "" : " --spec " + opts->spec) << "\n";
    }
    if (const int signal = stop_signals.caught()) {
      const auto& last = requests[logs.size() - 1];
      // A session that logged beside a default log another session held goes on from its own log, which
      // --resume alone does not read (it reads the default one).
      const bool beside_default = logs.back() != log_path_of(last);
      const std::string resume =
          !beside_default        ? "--resume"
          : requests.size() == 1 ? "--resume --log " + logs.back()
                                 : fmt::format("--resume (which reads the default logs: this session's is {}, "
                                               "beside the one another session held)",
                                               logs.back());
      std::cerr << fmt::format("stopped by {} in the session of {} on {} ({} of {}): {} holds the best found so "
                               "far; run again with {} to go on\n",
                               StopSignals::name(signal), last.family->name(), last.problem.key(), logs.size(),
                               requests.size(), opts->cache, resume);
      global.exit_code = 128 + signal;
    }
    if (!failed.empty())
      throw_error(ErrorKind::kCheckFailed, fmt::format("no config ran to the end for {}", fmt::join(failed, "; ")));
  });
}

}  // namespace ktune::cli
