#include "templates/family.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <limits>
#include <string>

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


double shortest(float value) { return std::stod(fmt::format("{}", value)); }

float f32_scalar(const std::string& family, const std::string& name, double value) {
  KTUNE_REQUIRE(std::abs(value) <= std::numeric_limits<float>::max(),
                fmt::format("{}: '{}' = {:g} is past the range of f32 (the kernel would take inf)", family, name,
                            value));
  return static_cast<float>(value);
}

Scalars Family::resolve_scalars(const Problem& problem, const Scalars& given) const {
  Scalars all = scalars(problem);
  for (const auto& [key, value] : given) {
    const auto it = all.find(key);
    if (it == all.end()) {
      std::vector<std::string> known;
      for (const auto& [k, v] : all) known.push_back(k);
      throw_error(ErrorKind::kInvalidInput,
                  known.empty() ? fmt::format("{} takes no parameters ('{}' given)", name(), key)
                                : fmt::format("{}: no parameter '{}'; its parameters: {}", name(), key,
                                              fmt::join(known, ", ")));
    }
    KTUNE_REQUIRE(std::isfinite(value), fmt::format("{}: parameter '{}' is {}", name(), key, value));
    it->second = value;
  }
  return all;
}

Workload Family::make_workload(const Problem& problem, std::uint64_t seed, const Scalars& scalars) const {
  require_checkable(problem, scalars);
  if (resolve_scalars(problem, scalars) != this->scalars(problem))
    throw_error(ErrorKind::kInternal, name() + ": its reference does not take its run-time parameters (a family "
                                               "with scalars overrides make_workload(problem, seed, scalars))");
  return make_workload(problem, seed);
}

void Family::require_checkable(const Problem& problem, const Scalars& scalars) const {
  (void)resolve_scalars(problem, scalars);
}

std::vector<Launch> Family::plan(const Config& config, const Problem& problem,
                                 const std::vector<std::uint64_t>& addresses, const DeviceLimits& device,
                                 const Scalars& scalars) const {
  resolve_scalars(problem, scalars);  // a family without scalars refuses any
  return plan(config, problem, addresses, device);
}

ProblemForm Family::problem_form() const { return ProblemForm::of(problem_classes()); }

void Family::check(const Problem& problem) const {
  require_dims(name(), problem, problem_form());
  check_problem(problem);
}

}  // namespace ktune::templates
