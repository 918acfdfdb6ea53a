// Eager chains on the device backend (see eager_chains.hpp).
#include "model/ops/eager_chains.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "base/error.hpp"

namespace ktune::model {

namespace eager = templates::eager;

bool runs_as_chain(Mode mode, const templates::Family& family, bool deterministic) {
  if (mode != Mode::kEager) return false;
  static const std::vector<std::string> decomposed = eager::decomposed_families();
  // The chains whose every step sums in a fixed order; a step's order is its family's, whatever the problem.
  static const std::set<std::string> fixed_order = [] {
    std::set<std::string> out;
    for (const auto& name : decomposed) {
      const templates::Family& f = templates::find_family(name);
      const auto steps = eager::decompose(name, f.problem_classes().front()).steps;
      if (std::all_of(steps.begin(), steps.end(), [](const eager::Step& s) {
            return s.family->deterministic(s.family->default_config(s.problem));
          }))
        out.insert(name);
    }
    return out;
  }();
  if (std::find(decomposed.begin(), decomposed.end(), family.name()) == decomposed.end()) return false;
  return !deterministic || fixed_order.count(family.name()) > 0;
}

std::vector<tuner::KernelRequest> with_chains(Mode mode, const std::vector<tuner::KernelRequest>& requests,
                                              bool deterministic) {
  std::vector<tuner::KernelRequest> out;
  const auto add = [&](const templates::Family* family, const templates::Problem& problem) {
    const auto same = [&](const tuner::KernelRequest& r) { return r.family == family && r.problem == problem; };
    if (std::none_of(out.begin(), out.end(), same)) out.push_back({family, problem});
  };
  for (const auto& r : requests) {
    if (!runs_as_chain(mode, *r.family, deterministic)) {
      add(r.family, r.problem);
      continue;
    }
    for (const auto& step : eager::decompose(r.family->name(), r.problem).steps) add(step.family, step.problem);
  }
  return out;
}

std::size_t chain_temporaries_bytes(Mode mode, const tuner::KernelRequest& request, bool deterministic) {
  return runs_as_chain(mode, *request.family, deterministic)
             ? eager::temporaries_bytes(request.family->name(), request.problem)
             : 0;
}

std::string chain_plan_key(const templates::Family& family, const templates::Problem& problem,
                           const eager::Bindings& args, std::size_t kept) {
  std::string key = fmt::format("{}|{}|kept={}", family.name(), problem.key(), kept);
  for (const auto& [name, address] : args) key += fmt::format("|{}={:x}", name, address);
  for (const auto& [name, value] : args.scalars) key += fmt::format("|{}={:a}", name, value);
  return key;
}

void DeviceOps::run_chain(const templates::Family& family, const templates::Problem& problem, std::size_t kept,
                          const eager::Bindings& args) {
  const std::string key = chain_plan_key(family, problem, args, kept);
  auto it = chain_plans_->plans.find(key);
  if (it == chain_plans_->plans.end()) {
    const std::uint64_t temporaries = scratch(eager::temporaries_bytes(family.name(), problem), kept);
    auto plan = eager::plan(family.name(), problem, args, temporaries, backend_.device());
    for (const auto& step : plan.steps) {
      const auto& k = kernel(*step.family, step.problem);
      if (!(k.chosen.config == step.config))
        throw_error(ErrorKind::kInternal,
                    fmt::format("eager {}: step {} on {} was prepared with {}, planned with {}", family.name(),
                                step.family->name(), step.problem.key(), k.chosen.config.str(), step.config.str()));
    }
    it = chain_plans_->plans.emplace(key, std::move(plan)).first;
  }
  for (const auto& step : it->second.steps) launch(kernel(*step.family, step.problem), step.launches);
}

std::size_t DeviceOps::chain_plans() const { return chain_plans_->plans.size(); }

}  // namespace ktune::model
