#include "base/space.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "base/error.hpp"
#include "base/json_input.hpp"

namespace ktune {

std::int64_t Config::at(const std::string& name) const {
  const auto it = values_.find(name);
  KTUNE_REQUIRE(it != values_.end(), "config has no parameter '" + name + "'");
  return it->second;
}

nlohmann::json Config::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : values_) j[k] = v;
  return j;
}

Config Config::from_json(const nlohmann::json& j) {
  KTUNE_REQUIRE(j.is_object(), "a config must be a JSON object of integer parameters, got " + j.dump());
  Config c;
  for (const auto& [k, v] : j.items()) {
    c.values_[k] = int64_of(v, "config parameter '" + k + "'");
  }
  return c;
}

std::string Config::str() const { return to_json().dump(); }

const Param& Space::param(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return p;
  std::vector<std::string> names;
  for (const auto& p : params_) names.push_back(p.name);
  throw_error(ErrorKind::kInvalidInput,
              fmt::format("unknown tunable '{}'{}; this space has: {}", name, did_you_mean(name, names),
                          fmt::join(names, ", ")));
}

std::uint64_t Space::size() const {
  std::uint64_t n = 1;
  for (const auto& p : params_) n *= p.values.size();
  return params_.empty() ? 0 : n;
}

Config Space::at(std::uint64_t index) const {
  Config c;
  for (auto it = params_.rbegin(); it != params_.rend(); ++it) {
    const auto radix = it->values.size();
    c.set(it->name, it->values[index % radix]);
    index /= radix;
  }
  return c;
}

std::optional<std::uint64_t> Space::index_of(const Config& config) const {
  std::uint64_t index = 0;
  for (const auto& p : params_) {
    if (!config.has(p.name)) return std::nullopt;
    const auto pos = std::find(p.values.begin(), p.values.end(), config.at(p.name));
    if (pos == p.values.end()) return std::nullopt;
    index = index * p.values.size() + static_cast<std::uint64_t>(pos - p.values.begin());
  }
  return index;
}

void Space::check_member(const Config& config) const {
  for (const auto& [name, value] : config.values()) {
    const Param& p = param(name);
    KTUNE_REQUIRE(std::find(p.values.begin(), p.values.end(), value) != p.values.end(),
                  fmt::format("tunable '{}' = {} is not in its domain {{{}}}", name, value,
                              fmt::join(p.values, ", ")));
  }
  for (const auto& p : params_)
    KTUNE_REQUIRE(config.has(p.name), fmt::format("config is missing tunable '{}' (domain {{{}}})", p.name,
                                                  fmt::join(p.values, ", ")));
}

std::vector<Config> Space::neighbours(const Config& config) const {
  std::vector<Config> out;
  for (const auto& p : params_) {
    const auto pos = std::find(p.values.begin(), p.values.end(), config.at(p.name));
    if (pos == p.values.end()) continue;
    const auto i = pos - p.values.begin();
    for (auto j : {i - 1, i + 1}) {
      if (j < 0 || j >= static_cast<std::ptrdiff_t>(p.values.size())) continue;
      Config n = config;
      n.set(p.name, p.values[static_cast<size_t>(j)]);
      out.push_back(std::move(n));
    }
  }
  return out;
}

}  // namespace ktune
