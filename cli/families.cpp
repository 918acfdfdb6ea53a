// `ktune families`: every registered kernel family on one line, with the
// dtypes and dimensions its problems take and the size of its space.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>

#include "base/json_output.hpp"
#include "cli/commands.hpp"
#include "cli/table.hpp"
#include "templates/family.hpp"

namespace ktune::cli {

void add_families_command(CLI::App& app, Global& global) {
  auto* cmd = app.add_subcommand("families", "List the kernel families with their problem dtypes and dimensions");
  cmd->callback([&global] {
    nlohmann::json j = nlohmann::json::array();
    Table table({{"family"}, {"dtypes"}, {"dims"}, {"points", true}, {"what it computes"}});
    for (const auto* f : templates::all_families()) {
      const auto form = f->problem_form();
      j.push_back({{"family", f->name()}, {"summary", f->summary()}, {"dtypes", form.dtypes},
                   {"dims", form.required}, {"optional_dims", form.optional}, {"points", f->space().size()}});
      // The scalars a launch takes, at their values for the first problem class (render --space --problem: another's).
      j.back()["parameters"] = f->scalars(f->problem_classes().front());
      table.add({f->name(), fmt::format("{}", fmt::join(form.dtypes, ", ")), form.dims_text(),
                 std::to_string(f->space().size()), f->summary()});
    }
    if (global.json) {
      std::cout << dump_json(j, 2) << "\n";
      return;
    }
    std::cout << table.str()
              << "A problem is {\"dtype\": ..., \"dims\": {...}}; `ktune render --family F --space` shows a family's "
                 "space, problem classes and run-time parameters.\n";
  });
}

}  // namespace ktune::cli
