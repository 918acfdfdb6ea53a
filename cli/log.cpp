// `ktune log show F`: the summary of a tuning session from its log (written
// by `ktune tune`, by default under $KTUNE_CACHE_DIR/sessions): the same
// table of fastest configs tune prints at its end.
#include <fmt/format.h>

#include <iostream>

#include "base/error.hpp"
#include "base/json_output.hpp"
#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "cli/tune_report.hpp"
#include "tuner/session/session.hpp"
#include "tuner/session/tuned_kernels.hpp"

namespace ktune::cli {

void add_log_command(CLI::App& app, Global& global) {
  auto* cmd = app.add_subcommand("log", "Read tuning session logs");
  cmd->require_subcommand(1);
  struct Opts {
    std::string file, spec;
    std::size_t top = 10;
  };
  auto opts = std::make_shared<Opts>();
  auto* show = cmd->add_subcommand("show", "Summary of a session log: the fastest configs, failures, speed-up");
  show->add_option("file", opts->file, "Session log (`ktune tune --log F`, or under $KTUNE_CACHE_DIR/sessions)")
      ->required();
  show->add_option("--spec", opts->spec, "The kernel spec of a session tuned with --spec")->check(input_file());
  show->add_option("--top", opts->top, "Configs in the table")->check(integer_at_least(1));
  show->callback([opts, &global] {
    const auto log = tuner::read_session_log(opts->file);
    if (const std::string note = tuner::unreadable_note(opts->file, log.unreadable, "their evaluations are not shown");
        !note.empty())
      std::cerr << "note: " << note << "\n";
    const auto& h = log.header();
    const std::string name = h.value("family", "");
    KTUNE_REQUIRE(templates::family_named(name) != nullptr || !opts->spec.empty(),
                  "the session tuned '" + name + "', which is not a built-in family: give its kernel spec with --spec");
    const auto& family = opts->spec.empty() ? templates::find_family(name) : family_arg("", opts->spec);
    KTUNE_REQUIRE(family.name() == name, "the session tuned '" + name + "', but --spec is '" + family.name() + "'");
    SessionView view;
    view.family = &family;
    view.problem = h.contains("problem_json") ? templates::Problem::from_json(h["problem_json"])
                                              : templates::Problem::from_key(h.value("problem", ""));
    // Logs from before the header named its backend: the emulation's device name says it.
    view.backend = h.value("backend", h.value("gpu", "").rfind("host emulation", 0) == 0 ? "emu" : "gpu");
    view.peak_bandwidth_gbs = h.value("peak_bandwidth_gbs", 0.0);
    for (const auto& r : log.records) view.evaluations.push_back(evaluation_of(r));
    // The default the session measured on its arch (the limits of its kind, not of the very GPU); an arch
    // ktune does not know, or nothing valid there, leaves the family's default to label the table.
    try {
      view.default_config = tuner::default_on(family, view.problem, DeviceLimits::for_arch(h.value("arch", "")));
    } catch (const Error&) {
    }
    if (log.winner.is_object()) view.winner = Config::from_json(log.winner.at("config")).str();
    if (global.json) {
      std::cout << dump_json(nlohmann::json{{"file", opts->file},
                                           {"session", h},
                                           {"sessions", log.sessions},
                                           {"winner", log.winner},
                                           {"evaluations", view.evaluations.size()},
                                           {"top", top_json(view, opts->top)},
                                           {"failure_kinds", failure_json(view.evaluations)}},
                             2)
                << "\n";
      return;
    }
    // The first session's search, then each resumed one that searched otherwise.
    std::string searches;
    for (const auto& s : log.sessions)
      searches += fmt::format("{}strategy {}, seed {}", searches.empty() ? "" : ", resumed with ",
                              s.value("strategy", "?"), s.value("seed", 0));
    std::cout << fmt::format("{} ({}, {}, {})\n", opts->file, h.value("gpu", "?"), h.value("arch", "?"), searches);
    std::cout << summary_line(view) << "\n";
    if (log.winner.is_object()) {
      const auto& w = log.winner;
      const std::string stopped_by = w.value("stopped_by", std::string("?"));
      // A session stopped by a signal takes its best as the search timed it; older logs name no finalists.
      const bool again = w.contains("finalists") ? !w.at("finalists").empty() : stopped_by != "a stop signal";
      std::cout << fmt::format("winner {} at {:.4f} ms (p20-p80 {:.4f}-{:.4f}, {}; tied finalists {}; stopped by {})\n",
                               view.winner, w.value("time_ms", 0.0), w.value("p20_ms", 0.0), w.value("p80_ms", 0.0),
                               again ? "timed again beside the finalists" : "as timed in the search",
                               w.value("tied", 0), stopped_by);
      if (const auto out = w.find("disqualified"); out != w.end() && out->is_array())
        for (const auto& d : *out)
          if (d.is_object() && d.contains("config"))
            std::cout << fmt::format("finalist {} failed when timed again beside the others ({}); it won nothing\n",
                                     Config::from_json(d.at("config")).str(), d.value("failure", std::string("?")));
      if (const auto fixed = w.find("deterministic"); fixed != w.end() && fixed->is_object())
        std::cout << fmt::format("it sums by atomics, in no fixed order; a --deterministic run takes {} at {:.4f} ms, "
                                 "the fastest measured that does not\n",
                                 Config::from_json(fixed->at("config")).str(), fixed->value("time_ms", 0.0));
    } else {
      std::cout << "no winner yet: the session was stopped or killed before it picked one; `ktune tune` with the same "
                   "arguments, --resume and --log "
                << opts->file << " goes on from these results\n";
    }
    std::cout << top_table(view, opts->top);
    if (const std::string failures = failure_table(view.evaluations); !failures.empty())
      std::cout << "the configs that failed, by kind:\n" << failures;
    if (view.emulated())
      std::cout << "emulated: times and speed-ups are host wall times of the emulation, not GPU results\n";
  });
}

}  // namespace ktune::cli
