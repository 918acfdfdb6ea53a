#include "tuner/run/runner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "search/winner.hpp"

namespace ktune::tuner {

Measurement summarize(std::vector<double> samples) {
  Measurement m;
  m.samples_ms = samples;
  if (samples.empty()) return m;
  std::sort(samples.begin(), samples.end());
  m.median_ms = search::percentile(samples, 0.5);
  m.p20_ms = search::percentile(samples, 0.2);
  m.p80_ms = search::percentile(samples, 0.8);
  m.repetitions = static_cast<int>(samples.size());
  return m;
}

namespace {

nlohmann::json measurement_json(const Measurement& m) {
  nlohmann::json j = {{"median_ms", m.median_ms},     {"p20_ms", m.p20_ms},         {"p80_ms", m.p80_ms},
                      {"repetitions", m.repetitions}, {"samples_ms", m.samples_ms}, {"method", m.method}};
  if (!m.shared_with.empty()) j["shared_with"] = m.shared_with;
  return j;
}

Measurement measurement_from_json(const nlohmann::json& t) {
  Measurement m;
  m.median_ms = t.at("median_ms").get<double>();
  m.p20_ms = t.at("p20_ms").get<double>();
  m.p80_ms = t.at("p80_ms").get<double>();
  m.repetitions = t.at("repetitions").get<int>();
  // Absent in session logs written before the samples were kept.
  if (t.contains("samples_ms")) m.samples_ms = t["samples_ms"].get<std::vector<double>>();
  m.method = t.at("method").get<std::string>();
  if (t.contains("shared_with")) m.shared_with = t["shared_with"].get<std::vector<std::string>>();
  return m;
}

}  // namespace

nlohmann::json to_json(const RunOptions& o) {
  return {{"seed", o.seed}, {"validate", o.validate}, {"time", o.time}, {"warmup", o.warmup},
          {"min_repetitions", o.min_repetitions}, {"max_repetitions", o.max_repetitions},
          {"min_seconds", o.min_seconds}, {"per_launch", o.per_launch}, {"scalars", o.scalars}};
}

RunOptions run_options_from_json(const nlohmann::json& j) {
  RunOptions o;
  o.seed = j.at("seed").get<std::uint64_t>();
  o.validate = j.at("validate").get<bool>();
  o.time = j.at("time").get<bool>();
  o.warmup = j.at("warmup").get<int>();
  o.min_repetitions = j.at("min_repetitions").get<int>();
  o.max_repetitions = j.at("max_repetitions").get<int>();
  o.min_seconds = j.at("min_seconds").get<double>();
  o.per_launch = j.value("per_launch", false);
  if (j.contains("scalars")) o.scalars = j.at("scalars").get<templates::Scalars>();
  return o;
}

nlohmann::json to_json(const RunResult& r) {
  nlohmann::json j = {{"ok", r.ok}, {"failure", r.failure}, {"max_error", r.max_error},
                      {"compile_ms", r.compile_ms}, {"wall_ms", r.wall_ms}, {"errors", nlohmann::json::array()}};
  for (const auto& [name, e] : r.errors) j["errors"].push_back({{"buffer", name}, {"error", e}});
  for (const auto& e : r.rms_errors)
    j["rms_errors"].push_back({{"buffer", e.buffer}, {"rms", e.rms}, {"atol", e.atol}});
  if (r.timing) j["timing"] = measurement_json(*r.timing);
  if (!r.not_stored.empty()) j["not_stored"] = r.not_stored;
  for (const auto& [kernel, m] : r.launch_timings)
    j["launch_timings"].push_back({{"kernel", kernel}, {"timing", measurement_json(m)}});
  return j;
}

RunResult run_result_from_json(const nlohmann::json& j) {
  RunResult r;
  r.ok = j.at("ok").get<bool>();
  r.failure = j.at("failure").get<std::string>();
  // A NaN error travels as JSON null.
  r.max_error = j.at("max_error").is_number() ? j["max_error"].get<double>() : std::nan("");
  r.compile_ms = j.at("compile_ms").get<double>();
  r.wall_ms = j.value("wall_ms", 0.0);  // absent in logs written before it was recorded
  for (const auto& e : j.at("errors"))
    r.errors.emplace_back(e.at("buffer").get<std::string>(),
                          e.at("error").is_number() ? e["error"].get<double>() : std::nan(""));
  if (j.contains("rms_errors"))  // absent in logs written before it was recorded
    for (const auto& e : j["rms_errors"])
      r.rms_errors.push_back({e.at("buffer").get<std::string>(),
                              e.at("rms").is_number() ? e["rms"].get<double>() : INFINITY, e.at("atol").get<double>()});
  if (j.contains("timing")) r.timing = measurement_from_json(j["timing"]);
  r.not_stored = j.value("not_stored", "");
  if (j.contains("launch_timings"))
    for (const auto& l : j["launch_timings"])
      r.launch_timings.emplace_back(l.at("kernel").get<std::string>(), measurement_from_json(l.at("timing")));
  return r;
}

void check_results(const templates::Workload& workload, const std::vector<std::vector<std::byte>>& results,
                   RunResult& result) {
  result.errors.clear();
  result.rms_errors.clear();
  result.max_error = 0;
  std::string worst;
  for (std::size_t i = 0; i < workload.buffers.size(); ++i) {
    const auto& b = workload.buffers[i];
    if (b.role != templates::Role::kOutput && b.role != templates::Role::kInOut) continue;
    const double e = templates::relative_error(b, results.at(i));
    result.errors.emplace_back(b.name, e);
    if (b.atol > 0) result.rms_errors.push_back({b.name, templates::rms_error(b, results.at(i)), b.atol});
    const bool pass = templates::within_tolerance(b, results.at(i), e);
    if (!pass && worst.empty()) worst = "validation: " + templates::mismatch(b, results.at(i), e);
    if (!(e <= result.max_error)) result.max_error = e;
  }
  result.ok = worst.empty();
  result.failure = worst;
}

}  // namespace ktune::tuner
