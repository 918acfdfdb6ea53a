#include "templates/family.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <utility>

#include "base/error.hpp"
#include "base/hash.hpp"
#include "templates/embedded.hpp"

namespace ktune::templates {

std::string Family::source_hash() const {
  Hasher h;
  h.add(name());
  for (const auto& f : source_files()) h.add(f).add(expand_includes(f));
  return h.hex();
}

ProblemForm Family::problem_form() const { return ProblemForm::of(problem_classes()); }

void Family::check(const Problem& problem) const {
  require_dims(name(), problem, problem_form());
  check_problem(problem);
}

Config default_on(const Family& family, const Problem& problem, const DeviceLimits& device) {
  const Config def = family.default_config(problem);
  if (family.is_valid(def, problem, device)) return def;
  // Distance from the default: parameters changed, then steps along their domains.
  const auto& params = family.space().params();
  const auto position = [](const Param& p, std::int64_t v) {
    return std::find(p.values.begin(), p.values.end(), v) - p.values.begin();
  };
  std::optional<Config> best;
  std::pair<std::int64_t, std::int64_t> best_distance;
  for (std::uint64_t i = 0; i < family.space().size(); ++i) {
    const Config c = family.space().at(i);
    std::pair<std::int64_t, std::int64_t> distance{0, 0};
    for (const auto& p : params) {
      const auto steps = std::abs(position(p, c.at(p.name)) - position(p, def.at(p.name)));
      distance.first += steps != 0 ? 1 : 0;
      distance.second += steps;
    }
    if ((!best || distance < best_distance) && family.is_valid(c, problem, device)) {
      best = c;
      best_distance = distance;
    }
  }
  KTUNE_REQUIRE(best.has_value(), fmt::format("{}: no config of the space is valid for {} on {}", family.name(),
                                              problem.key(), device.arch));
  return *best;
}

}  // namespace ktune::templates
