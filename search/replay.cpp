// Replay evaluator: a Kernel Tuner cache file as a space and its outcomes.
#include "search/replay.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "base/error.hpp"
#include "search/kernel_tuner_format.hpp"
#include "search/sampling.hpp"
#include "search/winner.hpp"

namespace ktune::search {
using nlohmann::json;

ReplayEvaluator::ReplayEvaluator(const std::filesystem::path& file) {
  const json doc = read_kernel_tuner_cache(file);
  device_name_ = doc.value("device_name", "unknown");
  kernel_name_ = doc.value("kernel_name", "unknown");
  std::vector<std::string> keys;
  if (doc.contains("tune_params_keys") && doc["tune_params_keys"].is_array()) {
    for (const auto& k : doc["tune_params_keys"]) {
      KTUNE_REQUIRE(k.is_string(), fmt::format("{}: \"tune_params_keys\" lists {}, not a parameter's name",
                                               file.string(), k.dump()));
      keys.push_back(k.get<std::string>());
    }
  } else {
    for (const auto& [k, _] : doc["tune_params"].items()) keys.push_back(k);
  }
  std::vector<Param> params;
  for (const std::string& name : keys) {
    KTUNE_REQUIRE(doc["tune_params"].contains(name) && doc["tune_params"][name].is_array() &&
                      !doc["tune_params"][name].empty(),
                  fmt::format("{}: tunable parameter '{}' has no list of values", file.string(), name));
    const json& values = doc["tune_params"][name];
    Param p{name, {}, "recorded"};
    const bool integral =
        std::all_of(values.begin(), values.end(), [](const json& v) { return v.is_number_integer(); });
    for (std::size_t i = 0; i < values.size(); ++i)
      p.values.push_back(integral ? values[i].get<std::int64_t>() : static_cast<std::int64_t>(i));
    if (!integral) labels_[name] = std::vector<json>(values.begin(), values.end());
    params.push_back(std::move(p));
  }
  KTUNE_REQUIRE(!params.empty(), fmt::format("{}: no tunable parameter in \"tune_params\": no space to search",
                                             file.string()));
  space_ = Space(std::move(params));

  optimum_ms_ = INFINITY;
  for (const auto& [key, entry] : doc["cache"].items()) {
    if (!entry.is_object()) continue;
    Config c;
    bool in_domain = true;
    for (const Param& p : space_.params()) {
      if (!entry.contains(p.name)) {
        in_domain = false;
        break;
      }
      const json& v = entry[p.name];
      if (const auto it = labels_.find(p.name); it != labels_.end()) {
        const auto pos = std::find(it->second.begin(), it->second.end(), v);
        if (pos == it->second.end()) in_domain = false;
        else c.set(p.name, pos - it->second.begin());
      } else if (v.is_number_integer()) {
        c.set(p.name, v.get<std::int64_t>());
      } else {
        in_domain = false;
      }
    }
    const auto index = in_domain ? space_.index_of(c) : std::nullopt;
    if (!index) continue;
    Outcome o;
    // (Structured bindings are captured by name: C++20 allows [&] of them, Clang before 16 does not.)
    const auto ms = [&, &key = key, &entry = entry](const char* field) {
      const double v = entry.contains(field) && entry[field].is_number() ? entry[field].get<double>() : 0.0;
      KTUNE_REQUIRE(std::isfinite(v) && v >= 0, fmt::format("{}: configuration \"{}\" records a {} of {} ms; a cost "
                                                            "is a duration, 0 or more",
                                                            file.string(), key, field, entry[field].dump()));
      return v;
    };
    o.cost_s = (ms("compile_time") + ms("verification_time") + ms("benchmark_time")) / 1000.0;
    brute_force_s_ += o.cost_s;
    const json& t = entry.contains("time") ? entry["time"] : json();
    if (t.is_number() && std::isfinite(t.get<double>()) && t.get<double>() < 1e20) {
      KTUNE_REQUIRE(t.get<double>() > 0, fmt::format("{}: configuration \"{}\" records a time of {} ms; a "
                                                     "kernel's time is more than 0",
                                                     file.string(), key, t.dump()));
      o.ok = true;
      o.time_ms = t.get<double>();
      std::vector<double> times;
      if (entry.contains("times") && entry["times"].is_array())
        for (const auto& x : entry["times"])
          if (x.is_number()) times.push_back(x.get<double>());
      o.samples_ms = times;
      std::sort(times.begin(), times.end());
      o.p20_ms = times.empty() ? o.time_ms : percentile(times, 0.2);
      o.p80_ms = times.empty() ? o.time_ms : percentile(times, 0.8);
      optimum_ms_ = std::min(optimum_ms_, o.time_ms);
    } else {
      o.failure = t.is_string() ? t.get<std::string>() : "recorded failure";
      ++failures_;
    }
    records_[*index] = {o};
  }
  KTUNE_REQUIRE(!records_.empty(), fmt::format("{}: no recorded configuration matches the tunable parameters",
                                               file.string()));
  KTUNE_REQUIRE(std::isfinite(optimum_ms_),
                fmt::format("{}: every one of its {} recorded configurations failed: no time to score a search "
                            "against",
                            file.string(), records_.size()));
}

bool ReplayEvaluator::is_valid(const Config& config, std::string* why) const {
  const auto index = space_.index_of(config);
  if (index && records_.count(*index)) return true;
  if (why) *why = "not recorded in the replay file";
  return false;
}

bool ReplayEvaluator::is_valid_at(const std::vector<int>& positions) const {
  // Records are keyed by Space::index_of, the positions' mixed-radix index.
  return positions.size() == space_.params().size() && records_.count(index_of(space_, positions)) != 0;
}

Outcome ReplayEvaluator::evaluate(const Config& config) {
  const auto index = space_.index_of(config);
  const auto it = index ? records_.find(*index) : records_.end();
  if (it == records_.end()) {
    Outcome o;
    o.failure = "invalid: not recorded in the replay file";
    return o;
  }
  return it->second.outcome;
}

json ReplayEvaluator::value_label(const std::string& param, std::int64_t value) const {
  const auto it = labels_.find(param);
  if (it == labels_.end()) return value;
  KTUNE_REQUIRE(value >= 0 && value < static_cast<std::int64_t>(it->second.size()),
                fmt::format("parameter '{}' has no value index {}", param, value));
  return it->second[static_cast<std::size_t>(value)];
}

double ReplayEvaluator::fraction_of_optimum(double time_ms) const {
  return std::isfinite(time_ms) && time_ms > 0 ? optimum_ms_ / time_ms : 0.0;
}

}  // namespace ktune::search
