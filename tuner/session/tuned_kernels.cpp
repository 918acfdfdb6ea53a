#include "tuner/session/tuned_kernels.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <optional>
#include <utility>

#include "base/error.hpp"
#include "cache/key.hpp"
#include "cache/store.hpp"
#include "search/sampling.hpp"
#include "tuner/compile/compiler.hpp"

namespace ktune::tuner {

cache::Key cache_key(const templates::Family& family, const templates::Problem& problem, const DeviceLimits& device) {
  return cache::make_key(family, problem, device, nvrtc_version());
}

namespace {

/// default_on's config, and whether it stands in for a default (the arch's or the family's) that is not valid on
/// the device.
struct DeviceDefault {
  Config config;
  bool stand_in = false;
};

// The valid point of `family`'s space for `problem` on `device` that `accept`
// takes and that differs from `origin` in the fewest parameters, then by the
// fewest steps along their domains, then first in space order; nullopt where
// there is none.
std::optional<Config> nearest_valid(const templates::Family& family, const templates::Problem& problem,
                                    const DeviceLimits& device, const Config& origin_config,
                                    const std::function<bool(const Config&)>& accept) {
  const Space& space = family.space();
  const search::Point origin = search::point_of(space, origin_config);
  std::optional<Config> best;
  std::pair<int, int> best_distance;
  for (std::uint64_t i = 0; i < space.size(); ++i) {
    const search::Point point = search::point_at(space, i);
    std::pair<int, int> distance{0, 0};
    for (std::size_t k = 0; k < point.size(); ++k) {
      distance.first += point[k] != origin[k] ? 1 : 0;
      distance.second += std::abs(point[k] - origin[k]);
    }
    if (best && distance >= best_distance) continue;
    Config c = search::config_of(space, point);
    if (!accept(c) || !family.is_valid(c, problem, device)) continue;
    best = std::move(c);
    best_distance = distance;
  }
  return best;
}

DeviceDefault device_default(const templates::Family& family, const templates::Problem& problem,
                             const DeviceLimits& device) {
  if (auto arch = family.arch_default(problem, device); arch && family.is_valid(*arch, problem, device))
    return {*arch};
  const Config def = family.default_config(problem);
  std::string why_not_default;
  if (family.is_valid(def, problem, device, &why_not_default)) return {def};
  std::optional<Config> best = nearest_valid(family, problem, device, def, [](const Config&) { return true; });
  KTUNE_REQUIRE(best.has_value(), fmt::format("{}: no config of the space is valid for {} on {} (the default {}: {})",
                                              family.origin(), problem.key(), device.arch, def.str(), why_not_default));
  return {*best, true};
}

// The parameters in which `to` differs from `from`: "dq_atomic 1 -> 0, mma 1 -> 0".
std::string changes(const Config& from, const Config& to) {
  std::string out;
  for (const auto& [name, value] : to.values()) {
    const std::int64_t was = from.at(name);
    if (was != value) out += fmt::format("{}{} {} -> {}", out.empty() ? "" : ", ", name, was, value);
  }
  return out;
}

}  // namespace

Config default_on(const templates::Family& family, const templates::Problem& problem, const DeviceLimits& device) {
  return device_default(family, problem, device).config;
}

ChosenConfig choose_config(const templates::Family& family, const templates::Problem& problem,
                           const DeviceLimits& device, const cache::TunedCache* tuned,
                           std::vector<std::string>* warnings, bool deterministic) {
  const auto [def, stand_in] = device_default(family, problem, device);
  const std::string default_source =
      stand_in ? fmt::format("the valid config nearest the default on {}", device.arch) : "default";
  ChosenConfig out;  // the default, until a tuned entry says otherwise
  out.config = def;
  out.source = default_source + " (no tuned cache)";
  // Why a tuned config cannot run here ("" where it can): off the family's space (the space changed since it was
  // tuned, or the file was edited), or not valid for this problem on this device.
  auto unusable = [&](const nlohmann::json& j) -> std::string {
    try {
      const Config c = Config::from_json(j);
      try {
        family.space().check_member(c);
      } catch (const Error& e) {
        return fmt::format("is not in the family's space ({})", e.what());
      }
      std::string why;
      return family.is_valid(c, problem, device, &why) ? "" : fmt::format("is not valid here ({})", why);
    } catch (const Error& e) {
      return fmt::format("cannot be read ({})", e.what());
    }
  };
  auto usable = [&](const nlohmann::json& j) { return unusable(j).empty(); };
  // A deterministic run takes the valid config nearest the chosen one that sums in a fixed order.
  const auto settle = [&](ChosenConfig chosen) {
    if (!deterministic || family.deterministic(chosen.config)) return chosen;
    const std::optional<Config> fixed = nearest_valid(family, problem, device, chosen.config,
                                                      [&](const Config& c) { return family.deterministic(c); });
    KTUNE_REQUIRE(fixed.has_value(), fmt::format("{}: no config of the space is both valid for {} on {} and "
                                                 "deterministic; the run cannot be deterministic",
                                                 family.origin(), problem.key(), device.arch));
    chosen.source += fmt::format("; made deterministic ({})", changes(chosen.config, *fixed));
    chosen.config = *fixed;
    chosen.made_deterministic = true;
    return chosen;
  };
  if (!tuned) return settle(out);
  // The nearest shape whose config cannot run here, for the reason where none can.
  const cache::Key query = cache_key(family, problem, device);
  struct Refused {
    const cache::Entry* entry = nullptr;
    double distance = 0;
    std::string why;
  } refused;
  const cache::Answer a = tuned->lookup(query, [&](const cache::Entry& e) {
    std::string why = unusable(e.config);
    if (why.empty()) return true;
    const double d = cache::shape_distance(e.key.dims, query.dims).value_or(1e300);
    if (!refused.entry || d < refused.distance) refused = {&e, d, std::move(why)};
    return false;
  });
  if (warnings) warnings->insert(warnings->end(), a.result.warnings.begin(), a.result.warnings.end());
  out.source = a.reason;
  if (a.result.match == cache::Match::kNone || !a.result.entry) {
    const std::string nearest = refused.entry && a.result.warnings.empty()
                                    ? fmt::format(": the nearest, tuned for {}, has config {}, which {}",
                                                  refused.entry->key.problem_key, refused.entry->config.dump(),
                                                  refused.why)
                                    : "";
    if (stand_in) out.source = default_source + " (no usable tuned entry" + nearest + ")";
    else if (!nearest.empty()) out.source = "default (no usable tuned entry" + nearest + ")";
    return settle(out);
  }
  if (const std::string why = unusable(a.result.entry->config); !why.empty()) {
    out.source = default_source + " (the exact entry's config is not valid here)";
    if (warnings)
      warnings->push_back(fmt::format("ignoring the tuned entry for {} {}{}: its config {} {}; the {} runs instead",
                                      family.name(), problem.key(),
                                      tuned->origin().empty() ? "" : " in " + tuned->origin(),
                                      a.result.entry->config.dump(), why, default_source));
    return settle(out);
  }
  out.config = Config::from_json(a.result.entry->config);
  out.match = a.result.match;
  if (a.result.entry->key.gpu_name != query.gpu_name) out.other_gpu = a.result.entry->key.gpu_name;
  // The tuning session's fastest config that sums in a fixed order, where it measured one and it runs here.
  const auto& pick = a.result.entry->deterministic;
  if (deterministic && !family.deterministic(out.config) && pick && usable(pick->config) &&
      family.deterministic(Config::from_json(pick->config))) {
    const Config measured = Config::from_json(pick->config);
    out.source += fmt::format("; deterministic: the fastest such config its tuning measured ({})",
                              changes(out.config, measured));
    out.config = measured;
    out.made_deterministic = true;
    out.deterministic_measured = true;
    return out;
  }
  return settle(out);
}

TunedKernels::TunedKernels(exec::Backend& backend, const cache::TunedCache* tuned, bool deterministic)
    : backend_(backend), tuned_(tuned), deterministic_(deterministic) {}

void TunedKernels::prepare(const std::vector<KernelRequest>& requests, unsigned threads) {
  std::vector<TunedKernel> fresh;
  std::vector<templates::Rendered> sources;
  for (const auto& r : requests) {
    KTUNE_REQUIRE(r.family != nullptr, "a kernel request names no family");
    r.family->check_problem(r.problem);
    const auto known = [&](const TunedKernel& k) { return k.family == r.family && k.problem == r.problem; };
    if (std::any_of(kernels_.begin(), kernels_.end(), known) || std::any_of(fresh.begin(), fresh.end(), known))
      continue;
    TunedKernel k{r.family, r.problem,
                  choose_config(*r.family, r.problem, backend_.device(), tuned_, &warnings_, deterministic_), {}};
    sources.push_back(r.family->render(k.chosen.config, r.problem));
    fresh.push_back(std::move(k));
  }
  backend_.precompile(sources, threads);
  for (std::size_t i = 0; i < fresh.size(); ++i) {
    try {
      fresh[i].module = backend_.load(sources[i]);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kCompile) throw;
      throw_error(ErrorKind::kCompile, fmt::format("{} on {} ({}): {}", fresh[i].family->name(),
                                                   fresh[i].problem.key(), fresh[i].chosen.config.str(), e.what()));
    }
  }
  for (auto& k : fresh) kernels_.push_back(std::move(k));
}

const TunedKernel& TunedKernels::get(const templates::Family& family, const templates::Problem& problem) const {
  for (const auto& k : kernels_)
    if (k.family == &family && k.problem == problem) return k;
  throw_error(ErrorKind::kInvalidInput,
              fmt::format("no prepared kernel for {} on {}: prepare() it first", family.name(), problem.key()));
}

std::size_t TunedKernels::made_deterministic() const {
  return static_cast<std::size_t>(std::count_if(kernels_.begin(), kernels_.end(),
                                                [](const TunedKernel& k) { return k.chosen.made_deterministic; }));
}

std::size_t TunedKernels::deterministic_measured() const {
  return static_cast<std::size_t>(std::count_if(kernels_.begin(), kernels_.end(), [](const TunedKernel& k) {
    return k.chosen.deterministic_measured;
  }));
}

std::size_t TunedKernels::count(cache::Match match) const {
  return static_cast<std::size_t>(
      std::count_if(kernels_.begin(), kernels_.end(), [&](const TunedKernel& k) { return k.chosen.match == match; }));
}

}  // namespace ktune::tuner
