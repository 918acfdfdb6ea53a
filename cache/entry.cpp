// JSON form of cache keys and entries, and the stamps put() fills in.
#include "cache/entry.hpp"

#include <fmt/format.h>

#include <cmath>
#include <ctime>
#include <limits>

#include "base/error.hpp"
#include "base/json_input.hpp"


namespace ktune::cache {
using nlohmann::json;

std::string Key::where() const {
  return fmt::format("{}|{}|{}|{}|{}", family, problem_key, dtype, arch, gpu_name);
}

std::string Key::identity() const {
  return fmt::format("{}|{}|{}|{}", where(), source_hash, nvrtc_version, driver_version);
}

bool Key::stale_for(const Key& query) const {
  return where() == query.where() &&
         (source_hash != query.source_hash || nvrtc_version != query.nvrtc_version ||
          driver_version != query.driver_version);
}

json to_json(const Key& key) {
  json dims = json::object();
  for (const auto& [k, v] : key.dims) dims[k] = v;
  return {{"family", key.family},       {"source_hash", key.source_hash},
          {"problem_key", key.problem_key}, {"dtype", key.dtype},
          {"arch", key.arch},           {"gpu_name", key.gpu_name},
          {"nvrtc_version", key.nvrtc_version}, {"driver_version", key.driver_version},
          {"dims", dims}};
}

json to_json(const Entry& e) {
  return {{"key", to_json(e.key)},
          {"config", e.config},
          {"time_ms", e.time_ms},
          {"p20_ms", e.p20_ms},
          {"p80_ms", e.p80_ms},
          {"spread", e.spread},
          {"evaluations", e.evaluations},
          {"repetitions", e.repetitions},
          {"date", e.date},
          {"ktune_version", e.ktune_version}};
}

namespace {
[[noreturn]] void bad(const std::string& where, const std::string& what) {
  throw_error(ErrorKind::kCache, fmt::format("cache file {} is not a valid ktune cache: {}", where, what));
}

std::string get_string(const json& j, const char* name, const std::string& where) {
  if (!j.contains(name) || !j[name].is_string()) bad(where, fmt::format("entry field '{}' must be a string", name));
  return j[name].get<std::string>();
}

// Measurements: finite and never negative.
double get_measurement(const json& j, const char* name, const std::string& where) {
  const bool ok = j.contains(name) && j[name].is_number() && std::isfinite(j[name].get<double>()) &&
                  j[name].get<double>() >= 0;
  if (!ok) bad(where, fmt::format("entry field '{}' must be a finite number >= 0", name));
  return j[name].get<double>();
}

// Counts: integers in 0..INT64_MAX.
std::int64_t get_count(const json& j, const char* name, const std::string& where) {
  const auto v = j.contains(name) ? exact_int64(j[name]) : std::nullopt;
  if (!v || *v < 0) bad(where, fmt::format("entry field '{}' must be an integer in 0..{}", name, INT64_MAX));
  return *v;
}
}  // namespace

std::optional<std::int64_t> exact_int64(const json& j) {
  if (j.is_number_unsigned()) {
    const auto u = j.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
    return static_cast<std::int64_t>(u);
  }
  if (j.is_number_integer()) return j.get<std::int64_t>();
  return std::nullopt;
}

Entry entry_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) bad(where, "an entry is not a JSON object");
  if (!j.contains("key") || !j["key"].is_object()) bad(where, "entry field 'key' must be an object");
  const json& k = j["key"];
  Entry e;
  e.key.family = get_string(k, "family", where);
  e.key.source_hash = get_string(k, "source_hash", where);
  e.key.problem_key = get_string(k, "problem_key", where);
  e.key.dtype = get_string(k, "dtype", where);
  e.key.arch = get_string(k, "arch", where);
  e.key.gpu_name = get_string(k, "gpu_name", where);
  e.key.nvrtc_version = get_string(k, "nvrtc_version", where);
  e.key.driver_version = get_string(k, "driver_version", where);
  if (!k.contains("dims") || !k["dims"].is_object()) bad(where, "key field 'dims' must be an object");
  for (const auto& [name, v] : k["dims"].items()) {
    const auto dim = exact_int64(v);
    if (!dim || *dim < 0)
      bad(where, fmt::format("shape dimension '{}' must be an integer in 0..{}", excerpt(name), INT64_MAX));
    e.key.dims[name] = *dim;
  }
  if (!j.contains("config") || !j["config"].is_object()) bad(where, "entry field 'config' must be an object");
  e.config = j["config"];
  e.time_ms = get_measurement(j, "time_ms", where);
  e.p20_ms = get_measurement(j, "p20_ms", where);
  e.p80_ms = get_measurement(j, "p80_ms", where);
  e.spread = get_measurement(j, "spread", where);
  e.evaluations = get_count(j, "evaluations", where);
  e.repetitions = get_count(j, "repetitions", where);
  e.date = get_string(j, "date", where);
  e.ktune_version = get_string(j, "ktune_version", where);
  return e;
}

}  // namespace ktune::cache
