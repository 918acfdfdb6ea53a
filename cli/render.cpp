// `ktune render`: print exactly what would be compiled for a family, config
// and problem (self-contained; compiles with nvcc alone), or the family's
// search space.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <regex>
#include <unordered_map>
#include <vector>

#include "base/json_output.hpp"
#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "tuner/session/tuned_kernels.hpp"

namespace ktune::cli {

void add_render_command(CLI::App& app, Global& global) {
  struct Opts {
    std::string family, spec, config, problem, arch = kDefaultArch;
    bool space = false;
  };
  auto opts = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("render", "Print the source ktune compiles for a variant, or a family's space");
  cmd->add_option("--family", opts->family, "Kernel family, " + family_choices());
  cmd->add_option("--spec", opts->spec, spec_help())->check(input_file());
  auto* config_option = cmd->add_option("--config", opts->config,
                                 "Config as JSON; unset tunables take the default on --arch")
                     ->check(json_text());
  cmd->add_option("--problem", opts->problem, std::string(kProblemHelp) + "; default: the family's first problem class")
      ->check(json_text());
  cmd->add_option("--arch", opts->arch, "Target whose limits the config is checked against")->capture_default_str();
  cmd->add_flag("--space", opts->space,
                "Print the family's search space and problem classes instead; with --problem, also how many of its "
                "points are valid for that problem on --arch, its default and its candidates (what a tuning session "
                "measures first)")
      ->excludes(config_option);
  cmd->callback([opts, &global] {
    const auto& family = family_arg(opts->family, opts->spec);
    const auto limits = templates::DeviceLimits::for_arch(opts->arch);  // an unknown one refused, --space or not
    if (opts->space) {
      nlohmann::json j = {{"family", family.name()}, {"summary", family.summary()}, {"size", family.space().size()}};
      // With --problem (a spec's own problem without): how many points the constraints admit for it on --arch.
      std::string valid_line;
      // The problem the run-time parameters' values are for (attention's scale is its head dim's).
      auto scalars_problem = family.problem_classes().front();
      if (!opts->problem.empty() || !opts->spec.empty()) {
        const auto problem = problem_arg(family, opts->problem);
        scalars_problem = problem;
        std::uint64_t valid = 0;
        // Why the others are not, by reason with its numbers left out ("grid 'n / b' = 12.5 is not a whole
        // number" and "= 18.5 ..." are one): what prunes a space, where no config says it alone.
        struct Reason {
          std::string example;  // the first config's own words
          std::uint64_t configs = 0;
        };
        std::map<std::string, Reason> reasons;
        const std::regex number("\\b[0-9]+(\\.[0-9]+)?(e[-+]?[0-9]+)?\\b");
        std::unordered_map<std::string, std::string> masked;  // why -> its reason: many configs give the same words
        for (std::uint64_t i = 0; i < family.space().size(); ++i) {
          std::string why;
          if (family.is_valid(family.space().at(i), problem, limits, &why)) {
            ++valid;
            continue;
          }
          auto known = masked.find(why);
          if (known == masked.end()) known = masked.emplace(why, std::regex_replace(why, number, "N")).first;
          Reason& r = reasons[known->second];
          if (r.configs++ == 0) r.example = why;
        }
        std::vector<Reason> by_count;
        for (auto& [key, r] : reasons) by_count.push_back(std::move(r));
        std::stable_sort(by_count.begin(), by_count.end(),
                         [](const Reason& a, const Reason& b) { return a.configs > b.configs; });
        j["problem"] = problem.to_json();
        j["valid"] = valid;
        j["invalid_reasons"] = nlohmann::json::array();
        for (const auto& r : by_count) j["invalid_reasons"].push_back({{"example", r.example}, {"configs", r.configs}});
        valid_line = fmt::format("{} valid for {} on {} ({} invalid (constraints))\n", valid, problem.key(),
                                 opts->arch, family.space().size() - valid);
        constexpr std::size_t kShown = 5;
        for (std::size_t r = 0; r < std::min(by_count.size(), kShown); ++r)
          valid_line += fmt::format("  {} not valid{} {}\n", by_count[r].configs,
                                    by_count[r].configs > 1 ? ", e.g." : ":", by_count[r].example);
        if (by_count.size() > kShown)
          valid_line += fmt::format("  ... and {} more reasons (--json lists them all)\n", by_count.size() - kShown);
        // The configs a tuning session measures first: the default on --arch, then the candidates valid there.
        if (valid > 0) {
          const Config def = tuner::default_on(family, problem, limits);
          j["default"] = def.to_json();
          valid_line += "default on " + opts->arch + ": " + def.str();
          // A default that is not valid here (a spec's that breaks its own restriction) is said, not swapped silently.
          if (const auto invalid = invalid_default(family, problem, limits, def)) {
            valid_line += fmt::format(" (stands in for the default {}, which is not valid here: {})",
                                      invalid->declared.str(), invalid->why);
            j["default_invalid"] = {{"config", invalid->declared.to_json()}, {"why", invalid->why}};
          }
          valid_line += "\n";
        } else {
          j["default"] = nullptr;
          valid_line += "no config runs it on " + opts->arch + " (`ktune run` says why the default does not)\n";
        }
        j["candidates"] = nlohmann::json::array();
        const auto candidates = family.candidates(problem);
        if (!candidates.empty()) valid_line += "candidates (a tuning session measures them right after the default):\n";
        for (const Config& c : candidates) {
          std::string why;
          const bool ok = family.is_valid(c, problem, limits, &why);
          j["candidates"].push_back({{"config", c.to_json()}, {"valid", ok}});
          if (!ok) j["candidates"].back()["why"] = why;
          valid_line += "  " + c.str() + (ok ? "" : fmt::format(" (skipped on {}: {})", opts->arch, why)) + "\n";
        }
      }
      for (const auto& p : family.space().params())
        j["params"].push_back({{"name", p.name}, {"values", p.values}, {"trades_off", p.trades_off}});
      for (const auto& p : family.problem_classes()) j["problem_classes"].push_back(p.to_json());
      // The run-time parameters, with the values checks and tuning use (a program gives its own at launch).
      const auto parameters = family.scalars(scalars_problem);
      j["parameters"] = parameters;
      if (global.json) {
        std::cout << dump_json(j, 2) << "\n";
        return;
      }
      std::cout << family.name() << ": " << family.summary() << "\n" << family.space().size() << " points\n"
                << valid_line;
      for (const auto& p : family.space().params())
        std::cout << fmt::format("  {:<20} {{{}}}  {}\n", p.name, fmt::join(p.values, ", "), p.trades_off);
      std::cout << "problem classes:\n";
      for (const auto& p : family.problem_classes()) std::cout << "  " << p.to_json().dump() << "\n";
      if (!parameters.empty()) {
        std::cout << "run-time parameters (their values in checks and tuning; a program gives its own at launch):\n";
        for (const auto& [name, value] : parameters) std::cout << fmt::format("  {} = {:g}\n", name, value);
      }
      return;
    }
    const auto problem = problem_arg(family, opts->problem);
    const auto config = config_arg(family, problem, opts->config, limits);
    const auto rendered = family.render(config, problem);
    if (global.json) {
      const nlohmann::json j{{"family", family.name()}, {"config", config.to_json()}, {"problem", problem.to_json()},
                             {"kernels", rendered.kernels}, {"source", rendered.source}};
      std::cout << dump_json(j, 2) << "\n";
      return;
    }
    std::cout << "// kernels: " << fmt::format("{}", fmt::join(rendered.kernels, "; ")) << "\n" << rendered.source;
  });
}

}  // namespace ktune::cli
