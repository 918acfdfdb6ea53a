#include "tuner/tuned_config.hpp"

#include <fmt/format.h>

#include <iostream>

#include "base/error.hpp"
#include "tuner/session.hpp"

namespace ktune::tuner {

ChosenConfig choose_config(const templates::Family& family, const templates::Problem& problem,
                           const templates::DeviceLimits& device, const cache::CacheFile* file) {
  ChosenConfig out{family.default_config(problem), "default"};
  if (!file) return out;
  auto usable = [&](const nlohmann::json& j) {
    try {
      const Config c = Config::from_json(j);
      family.space().check_member(c);
      return family.is_valid(c, problem, device);
    } catch (const Error&) {
      return false;
    }
  };
  cache::LookupOptions options;
  options.accept = [&](const cache::Entry& e) { return usable(e.config); };
  const auto found = file->lookup(cache_key(family, problem, device), options);
  for (const auto& w : found.warnings) std::cerr << "warning: " << w << "\n";
  if (found.match == cache::Match::kNone || !found.entry || !usable(found.entry->config)) return out;
  out.config = Config::from_json(found.entry->config);
  out.source = found.match == cache::Match::kExact ? "exact" : fmt::format("nearest (distance {:.2f})", found.distance);
  return out;
}

}  // namespace ktune::tuner
