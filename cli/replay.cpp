// `ktune replay`: scores a search strategy on a recorded tuning space (a
// Kernel Tuner cache file) over many seeded runs, with no GPU.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <set>

#include "base/error.hpp"
#include "base/json_output.hpp"
#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "cli/progress.hpp"
#include "search/replay_study.hpp"
#include "search/strategy.hpp"

namespace ktune::cli {
namespace {

/// Evaluations to the target, or `unreached` when a run never got there.
std::string evals_text(double v, const std::string& unreached) {
  return std::isfinite(v) ? fmt::format("{:.0f}", v) : unreached;
}

nlohmann::json number_json(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

// null for +inf (a run that never reached what is counted).
nlohmann::json quartiles_json(const search::Quartiles& q) {
  nlohmann::json j = {{"p25", number_json(q.p25)}, {"median", number_json(q.median)}, {"p75", number_json(q.p75)}};
  j["median_ci95"] = std::isnan(q.median_lo) ? nlohmann::json(nullptr)
                                             : nlohmann::json::array({number_json(q.median_lo),
                                                                      number_json(q.median_hi)});
  return j;
}

nlohmann::json runs_json(const std::vector<double>& values) {
  nlohmann::json j = nlohmann::json::array();
  for (const double v : values) j.push_back(number_json(v));
  return j;
}

/// ", 95% CI a-b" of the median, or "" where the runs are too few for one.
std::string interval_text(const search::Quartiles& q, const std::function<std::string(double)>& text) {
  return std::isnan(q.median_lo) ? "" : fmt::format(" (95% CI {} to {})", text(q.median_lo), text(q.median_hi));
}

}  // namespace

void add_replay_command(CLI::App& app, Global& global) {
  struct Args {
    std::string dataset;
    std::string strategies = "random";
    std::string budgets = "25,50,100,200,400";
    int runs = 50;
    std::uint64_t seed = 1;
    double target = 0.95;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("replay", "Score search strategies on a recorded tuning space (no GPU needed)");
  cmd->add_option("--dataset", args->dataset, "Kernel Tuner cache file (.json or .json.gz)")
      ->check(input_file())
      ->required();
  cmd->add_option("--strategy", args->strategies, "Strategy name(s), comma-separated, each " + strategy_choices())
      ->capture_default_str();
  cmd->add_option("--budget", args->budgets,
                  "Budgets, comma-separated: evaluations (100), recorded time (600s), a share of the brute-force time "
                  "(10%), or where a tuning session's stop condition ends it (plateau:150, plateau:150+10%)")
      ->capture_default_str();
  cmd->add_option("--runs", args->runs, "Seeded runs per strategy")
      ->check(integer_within(1, 1000000, "in 1..1000000"))
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "Seed of the first run (run r uses seed + r)")
      ->check(integer_at_least(0))
      ->capture_default_str();
  cmd->add_option("--target", args->target, "Fraction of the optimum for the evaluations-to-target column")
      ->check(finite_in(0, 1, true, false))
      ->capture_default_str();
  cmd->callback([args, &global] {
    // Every strategy and budget checked before anything is printed.
    const auto strategies = name_list_arg(args->strategies, "--strategy");
    std::set<std::string> named;
    for (const auto& name : strategies) {
      search::require_strategy(name);
      KTUNE_REQUIRE(named.insert(name).second,
                    fmt::format("--strategy names '{}' twice: a strategy is scored once (its runs are seeded)", name));
    }
    const auto budgets = name_list_arg(args->budgets, "--budget");
    search::ReplayEvaluator evaluator(args->dataset);
    search::ReplayStudyOptions options;
    for (const auto& b : budgets) {
      options.budgets.push_back(search::parse_replay_budget(b, evaluator.brute_force_s()));
      const search::ReplayBudget& added = options.budgets.back();
      for (std::size_t i = 0; i + 1 < options.budgets.size(); ++i) {  // "50,50" or "10m,600s": one row twice
        const search::ReplayBudget& earlier = options.budgets[i];
        KTUNE_REQUIRE(added.stop || earlier.stop ? earlier.label != added.label
                                                 : earlier.is_time != added.is_time || earlier.amount != added.amount,
                      fmt::format("--budget names '{}' twice ('{}' is the same budget): each is one row of the table",
                                  earlier.label, added.label));
      }
    }
    options.runs = args->runs;
    options.seed = args->seed;
    options.target = args->target;
    // What a run that did not reach the target within any budget is shown as:
    // beyond the largest evaluation budget where there are only such, else not
    // within the longest of each kind (the budget table's rows, one of which a
    // run that reached it reached it within).
    double max_evals = 0, max_seconds = 0;
    std::string max_evals_label, max_time_label;
    std::vector<std::string> longest;
    for (const auto& b : options.budgets) {
      if (b.stop) longest.push_back(b.label);
      else if (!b.is_time && b.amount >= max_evals) max_evals = b.amount, max_evals_label = b.label;
      else if (b.is_time && b.amount >= max_seconds) max_seconds = b.amount, max_time_label = b.label;
    }
    if (!max_time_label.empty()) longest.insert(longest.begin(), max_time_label);
    if (!max_evals_label.empty()) longest.insert(longest.begin(), max_evals_label);
    const std::string not_within = "not within " + fmt::format("{}", fmt::join(longest, " or "));
    const std::string unreached = longest.size() == 1 && max_evals > 0 ? fmt::format(">{:.0f}", max_evals) : not_within;

    nlohmann::json out = {{"dataset", args->dataset},
                          {"device", evaluator.device_name()},
                          {"space_size", evaluator.space().size()},
                          {"recorded", evaluator.recorded()},
                          {"recorded_failures", evaluator.recorded_failures()},
                          {"optimum_ms", evaluator.optimum_ms()},
                          {"brute_force_s", evaluator.brute_force_s()},
                          {"runs", args->runs},
                          {"target", args->target},
                          {"strategies", nlohmann::json::array()}};
    if (!global.json)
      std::cout << fmt::format(
          "{}: {} on {}, {} points, {} recorded ({} failed), optimum {:.4f} ms, brute force {:.0f} s, {} runs\n\n",
          args->dataset, evaluator.kernel_name(), evaluator.device_name(), evaluator.space().size(),
          evaluator.recorded(), evaluator.recorded_failures(), evaluator.optimum_ms(), evaluator.brute_force_s(),
          args->runs);
    for (const auto& name : strategies) {
      options.strategy = name;
      ProgressLine progress;
      options.on_run = [&](int done) {
        progress.update(fmt::format("{}: run {} of {}", name, done, args->runs));
      };
      const auto r = search::run_replay_study(evaluator, options);
      progress.finish();
      nlohmann::json j = {{"strategy", name},
                          {"evals_to_target", quartiles_json(r.evals_to_target)},
                          {"runs_reaching_target", r.runs_reaching_target},
                          {"seconds_to_target", quartiles_json(r.seconds_to_target)},
                          {"runs_to_target", {{"evaluations", runs_json(r.evals_to_target_runs)},
                                              {"seconds", runs_json(r.seconds_to_target_runs)}}},
                          {"wall_s", r.wall_s},
                          {"proposal_ms", {{"mean", r.proposal_ms_mean}, {"max", r.proposal_ms_max}}},
                          {"setup_ms_max", r.setup_ms_max},
                          {"budgets", nlohmann::json::array()}};
      for (const auto& b : r.budgets) {
        nlohmann::json jb = {{"budget", b.budget.label}, {"fraction_of_optimum", quartiles_json(b.fraction)}};
        if (b.budget.stop) {
          jb["stopped_after_evaluations"] = quartiles_json(b.stopped_evals);
          jb["stopped_after_seconds"] = quartiles_json(b.stopped_s);
        }
        j["budgets"].push_back(jb);
      }
      out["strategies"].push_back(j);
      if (global.json) continue;
      std::cout << fmt::format("strategy {}  ({:.1f} s)\n", name, r.wall_s);
      std::size_t w = 8;
      for (const auto& b : r.budgets) w = std::max(w, b.budget.label.size());
      std::cout << fmt::format("  {:>{}}  {:>8}  {:>8}  {:>8}   (fraction of optimum)\n", "budget", w, "median", "p25",
                               "p75");
      for (const auto& b : r.budgets)
        std::cout << fmt::format("  {:>{}}  {:>8.3f}  {:>8.3f}  {:>8.3f}\n", b.budget.label, w, b.fraction.median,
                                 b.fraction.p25, b.fraction.p75);
      // A file that records no costs has no brute-force time to take a share of.
      const bool costs = evaluator.brute_force_s() > 0;
      const auto pct = [&](double s) {
        return costs ? fmt::format("{:.1f}%", 100 * s / evaluator.brute_force_s()) : std::string("n/a");
      };
      for (const auto& b : r.budgets)
        if (b.budget.stop)
          std::cout << fmt::format("  {} stopped the runs after {:.0f} evaluations (p25 {:.0f}, p75 {:.0f}), {} of "
                                   "the brute-force time (p25 {}, p75 {})\n",
                                   b.budget.label, b.stopped_evals.median, b.stopped_evals.p25, b.stopped_evals.p75,
                                   pct(b.stopped_s.median), pct(b.stopped_s.p25), pct(b.stopped_s.p75));
      // The target as given: --target 0.9995 is 99.95 %, not a rounded 100 %.
      const std::string target = fmt::format("{:g}%", args->target * 100);
      const auto evals = [&](double v) { return evals_text(v, unreached); };
      std::cout << fmt::format("  evaluations to {} of optimum: median {}{}, p25 {}, p75 {} ({}/{} runs reached it)\n",
                               target, evals(r.evals_to_target.median), interval_text(r.evals_to_target, evals),
                               evals_text(r.evals_to_target.p25, unreached),
                               evals_text(r.evals_to_target.p75, unreached), r.runs_reaching_target, r.runs);
      const auto share = [&](double s) { return std::isfinite(s) ? pct(s) : not_within; };
      if (costs)
        std::cout << fmt::format("  recorded time to {} of optimum (share of brute force): median {}{}, p25 {}, p75 "
                                 "{}\n",
                                 target, share(r.seconds_to_target.median),
                                 interval_text(r.seconds_to_target, share), share(r.seconds_to_target.p25),
                                 share(r.seconds_to_target.p75));
      else
        std::cout << fmt::format("  recorded time to {} of optimum: n/a ({} records no compile, verification or "
                                 "benchmark time)\n",
                                 target, args->dataset);
      std::cout << fmt::format("  search overhead per proposal: mean {:.2f} ms, max {:.2f} ms; setup at most {:.0f} "
                               "ms\n\n",
                               r.proposal_ms_mean, r.proposal_ms_max, r.setup_ms_max);
    }
    if (global.json) std::cout << dump_json(out, 2) << "\n";
  });
}

}  // namespace ktune::cli
