// JSON form of cache keys and entries, and the stamps put() fills in.
#include "cache/entry.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <initializer_list>
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
  json j = key.extra;
  j.update(json{{"family", key.family},
                {"source_hash", key.source_hash},
                {"problem_key", key.problem_key},
                {"dtype", key.dtype},
                {"arch", key.arch},
                {"gpu_name", key.gpu_name},
                {"nvrtc_version", key.nvrtc_version},
                {"driver_version", key.driver_version},
                {"dims", dims}});
  return j;
}

json to_json(const Entry& e) {
  json j = e.extra;
  j.update(json{{"key", to_json(e.key)},
                {"config", e.config},
                {"time_ms", e.time_ms},
                {"p20_ms", e.p20_ms},
                {"p80_ms", e.p80_ms},
                {"spread", e.spread},
                {"evaluations", e.evaluations},
                {"repetitions", e.repetitions},
                {"date", e.date},
                {"ktune_version", e.ktune_version}});
  if (e.deterministic)
    j["deterministic"] = {{"config", e.deterministic->config}, {"time_ms", e.deterministic->time_ms}};
  return j;
}

namespace {
/// What is wrong with an entry; entry_from_json says where.
struct BadEntry {
  std::string what;
};
[[noreturn]] void bad(const std::string& what) { throw BadEntry{what}; }

std::string get_string(const json& j, const char* name) {
  if (!j.contains(name) || !j[name].is_string()) bad(fmt::format("entry field '{}' must be a string", name));
  return j[name].get<std::string>();
}

// Measurements: finite and never negative.
double get_measurement(const json& j, const char* name) {
  const bool ok = j.contains(name) && j[name].is_number() && std::isfinite(j[name].get<double>()) &&
                  j[name].get<double>() >= 0;
  if (!ok) bad(fmt::format("entry field '{}' must be a finite number >= 0", name));
  return j[name].get<double>();
}

// ISO 8601 UTC as put() stamps it, YYYY-MM-DDTHH:MM:SSZ, fractions of a
// second allowed: a calendar date and time of day (merge and prune compare
// dates as text, which orders these and only these by time).
bool iso8601_utc(const std::string& d) {
  const auto digits = [&](std::size_t at, std::size_t n) {
    if (at + n > d.size()) return -1;
    int v = 0;
    for (std::size_t i = at; i < at + n; ++i) {
      if (d[i] < '0' || d[i] > '9') return -1;
      v = v * 10 + (d[i] - '0');
    }
    return v;
  };
  if (d.size() < 20 || d[4] != '-' || d[7] != '-' || d[10] != 'T' || d[13] != ':' || d[16] != ':') return false;
  const int year = digits(0, 4), month = digits(5, 2), day = digits(8, 2);
  const int hour = digits(11, 2), minute = digits(14, 2), second = digits(17, 2);
  if (year < 0 || month < 1 || month > 12 || day < 1 || hour < 0 || hour > 23 || minute < 0 || minute > 59 ||
      second < 0 || second > 60)
    return false;
  const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (day > kDays[month - 1] + (month == 2 && leap ? 1 : 0)) return false;
  std::size_t at = 19;
  if (d[at] == '.') {
    const std::size_t first = ++at;
    while (at < d.size() && d[at] >= '0' && d[at] <= '9') ++at;
    if (at == first) return false;
  }
  return at + 1 == d.size() && d[at] == 'Z';
}

// Counts: integers in 0..INT64_MAX.
std::int64_t get_count(const json& j, const char* name) {
  const auto v = j.contains(name) ? exact_int64(j[name]) : std::nullopt;
  if (!v || *v < 0) bad(fmt::format("entry field '{}' must be an integer in 0..{}", name, INT64_MAX));
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

namespace {
/// The fields of `j` not named in `known`: what a newer ktune added.
json unknown_fields(const json& j, std::initializer_list<const char*> known) {
  json extra = json::object();
  for (const auto& [name, value] : j.items())
    if (std::none_of(known.begin(), known.end(), [&](const char* k) { return name == k; })) extra[name] = value;
  return extra;
}

Entry parse_entry(const json& j) {
  if (!j.is_object()) bad("an entry is not a JSON object");
  if (!j.contains("key") || !j["key"].is_object()) bad("entry field 'key' must be an object");
  const json& k = j["key"];
  Entry e;
  e.key.family = get_string(k, "family");
  e.key.source_hash = get_string(k, "source_hash");
  e.key.problem_key = get_string(k, "problem_key");
  e.key.dtype = get_string(k, "dtype");
  e.key.arch = get_string(k, "arch");
  e.key.gpu_name = get_string(k, "gpu_name");
  e.key.nvrtc_version = get_string(k, "nvrtc_version");
  e.key.driver_version = get_string(k, "driver_version");
  if (!k.contains("dims") || !k["dims"].is_object()) bad("key field 'dims' must be an object");
  for (const auto& [name, v] : k["dims"].items()) {
    const auto dim = exact_int64(v);
    if (!dim || *dim < 0)
      bad(fmt::format("shape dimension '{}' must be an integer in 0..{}", excerpt(name), INT64_MAX));
    e.key.dims[name] = *dim;
  }
  if (!j.contains("config") || !j["config"].is_object()) bad("entry field 'config' must be an object");
  e.config = j["config"];
  e.time_ms = get_measurement(j, "time_ms");
  e.p20_ms = get_measurement(j, "p20_ms");
  e.p80_ms = get_measurement(j, "p80_ms");
  e.spread = get_measurement(j, "spread");
  if (e.p20_ms > e.p80_ms)
    bad(fmt::format("entry fields 'p20_ms' and 'p80_ms' must be percentiles, p20 <= p80 (got {} > {})", e.p20_ms,
                    e.p80_ms));
  e.evaluations = get_count(j, "evaluations");
  e.repetitions = get_count(j, "repetitions");
  if (e.repetitions == 0) bad("entry field 'repetitions' must be at least 1: 'time_ms' is measured");
  e.date = get_string(j, "date");
  if (!iso8601_utc(e.date))
    bad(fmt::format("entry field 'date' must be ISO 8601 UTC (YYYY-MM-DDTHH:MM:SSZ), got '{}'", excerpt(e.date)));
  // A date to come would supersede every later measurement of its key (prune keeps the newest): a day's slack
  // for clocks that differ.
  const std::time_t tomorrow = std::time(nullptr) + 24 * 3600;
  std::tm t{};
  char latest[32] = "";
  if (::gmtime_r(&tomorrow, &t) != nullptr) std::strftime(latest, sizeof latest, "%Y-%m-%dT%H:%M:%SZ", &t);
  if (latest[0] != '\0' && e.date.compare(0, 19, latest, 19) > 0)
    bad(fmt::format("entry field 'date' is {}, more than a day from now: the clock of the machine that measured it "
                    "was wrong, or the date was edited; give the date it was measured",
                    e.date));
  e.ktune_version = get_string(j, "ktune_version");
  if (j.contains("deterministic")) {
    const json& d = j["deterministic"];
    const bool ok = d.is_object() && d.contains("config") && d["config"].is_object() && d.contains("time_ms") &&
                    d["time_ms"].is_number() && std::isfinite(d["time_ms"].get<double>()) &&
                    d["time_ms"].get<double>() >= 0;
    if (!ok) bad("entry field 'deterministic' must be an object holding a 'config' object and a 'time_ms' >= 0");
    e.deterministic = DeterministicPick{d["config"], d["time_ms"].get<double>()};
  }
  e.key.extra = unknown_fields(k, {"family", "source_hash", "problem_key", "dtype", "arch", "gpu_name",
                                   "nvrtc_version", "driver_version", "dims"});
  e.extra = unknown_fields(j, {"key", "config", "time_ms", "p20_ms", "p80_ms", "spread", "evaluations",
                               "repetitions", "date", "ktune_version", "deterministic"});
  return e;
}
}  // namespace

Entry entry_from_json(const json& j, const std::string& where, std::size_t index) {
  try {
    return parse_entry(j);
  } catch (const BadEntry& e) {
    // The entry's family and problem where they are there to read: a file may hold thousands.
    std::string key;
    if (j.is_object() && j.contains("key") && j["key"].is_object()) {
      const json& k = j["key"];
      for (const char* field : {"family", "problem_key"})
        if (k.contains(field) && k[field].is_string())
          key += (key.empty() ? "" : ", ") + excerpt(k[field].get<std::string>());
    }
    throw_error(ErrorKind::kCache, fmt::format("cache file {} is not a valid ktune cache: entries[{}]{}: {}", where,
                                               index, key.empty() ? "" : " (" + key + ")", e.what));
  }
}

}  // namespace ktune::cache
