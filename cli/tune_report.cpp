#include "cli/tune_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "cli/table.hpp"

namespace ktune::cli {
namespace {

/// Working evaluations, fastest first (ties by config, so the order repeats).
std::vector<const Evaluation*> ranked(const SessionView& s) {
  std::vector<const Evaluation*> out;
  for (const auto& e : s.evaluations)
    if (e.ok && e.median_ms > 0) out.push_back(&e);
  std::stable_sort(out.begin(), out.end(), [](const Evaluation* a, const Evaluation* b) {
    return a->median_ms != b->median_ms ? a->median_ms < b->median_ms : a->config < b->config;
  });
  return out;
}

std::optional<double> default_ms(const SessionView& s) {
  const Config def = s.default_of();
  for (const auto& e : s.evaluations)
    if (e.config == def && e.ok && e.median_ms > 0) return e.median_ms;
  return std::nullopt;
}

/// What a row can say beyond its time: rates only from GPU times (a host
/// emulation's wall time says nothing about a GPU's GB/s).
struct Rates {
  bool bandwidth = false, flops = false, peak = false;
};
Rates rates_for(const SessionView& s) {
  Rates r;
  if (s.emulated()) return r;
  r.bandwidth = s.family->bytes(s.problem) > 0;
  r.flops = s.family->flops(s.problem) > 0;
  r.peak = r.bandwidth && s.peak_bandwidth_gbs > 0;
  return r;
}

std::string vs_default_title(const SessionView& s) {
  return s.emulated() ? "vs default (emulated host time)" : "vs default";
}

}  // namespace

Evaluation evaluation_of(const search::Record& r) {
  return {r.config, r.outcome.ok, r.outcome.failure, r.outcome.time_ms, r.outcome.p20_ms, r.outcome.p80_ms};
}

Evaluation evaluation_of(const tuner::Record& r) {
  Evaluation e{r.config, r.result.ok && r.result.timing.has_value(), r.result.failure, 0, 0, 0};
  if (r.result.timing) {
    e.median_ms = r.result.timing->median_ms;
    e.p20_ms = r.result.timing->p20_ms;
    e.p80_ms = r.result.timing->p80_ms;
  }
  return e;
}

std::string top_table(const SessionView& s, std::size_t k) {
  const auto rows = ranked(s);
  if (rows.empty()) return "";
  const Rates rates = rates_for(s);
  const auto def = default_ms(s);
  const Config def_config = s.default_of();
  const std::vector<Config> candidates = s.family->candidates(s.problem);
  const double bytes = s.family->bytes(s.problem), flops = s.family->flops(s.problem);
  std::vector<Table::Column> columns = {{"#", true},
                                        {"config"},
                                        {s.emulated() ? "host ms (emulated)" : "time ms", true},
                                        {"p20-p80 ms", true},
                                        {"spread", true}};
  if (rates.bandwidth) columns.push_back({"GB/s", true});
  if (rates.flops) columns.push_back({"TFLOP/s", true});
  if (rates.peak) columns.push_back({"% of peak BW", true});
  columns.push_back({vs_default_title(s), true});
  columns.push_back({"note"});
  Table table(columns);
  for (std::size_t i = 0; i < std::min(k, rows.size()); ++i) {
    const Evaluation& e = *rows[i];
    const double seconds = e.median_ms * 1e-3;
    std::vector<std::string> cells = {std::to_string(i + 1), e.config.str(), fmt::format("{:.4f}", e.median_ms),
                                      fmt::format("{:.4f}-{:.4f}", e.p20_ms, e.p80_ms),
                                      fmt::format("{:.1f}%", 100 * (e.p80_ms - e.p20_ms) / e.median_ms)};
    if (rates.bandwidth) cells.push_back(fmt::format("{:.1f}", bytes / seconds / 1e9));
    if (rates.flops) cells.push_back(fmt::format("{:.2f}", flops / seconds / 1e12));
    if (rates.peak)
      cells.push_back(fmt::format("{:.0f}%", 100 * (bytes / (s.peak_bandwidth_gbs * 1e9)) / seconds));
    cells.push_back(def ? fmt::format("{:.2f}x", *def / e.median_ms) : "-");
    std::vector<std::string> notes;
    if (!s.winner.empty() && e.config.str() == s.winner) notes.push_back("winner");
    if (e.config == def_config) notes.push_back("default");
    if (std::find(candidates.begin(), candidates.end(), e.config) != candidates.end()) notes.push_back("candidate");
    std::string note;
    for (const auto& n : notes) note += (note.empty() ? "" : ", ") + n;
    cells.push_back(note);
    table.add(cells);
  }
  return table.str();
}

nlohmann::json top_json(const SessionView& s, std::size_t k) {
  nlohmann::json out = nlohmann::json::array();
  const auto rows = ranked(s);
  const Rates rates = rates_for(s);
  const auto def = default_ms(s);
  for (std::size_t i = 0; i < std::min(k, rows.size()); ++i) {
    const Evaluation& e = *rows[i];
    const double seconds = e.median_ms * 1e-3;
    nlohmann::json j = {{"config", e.config.to_json()}, {"time_ms", e.median_ms}, {"p20_ms", e.p20_ms},
                        {"p80_ms", e.p80_ms}, {"emulated", s.emulated()}};
    if (rates.bandwidth) j["gb_per_s"] = s.family->bytes(s.problem) / seconds / 1e9;
    if (rates.flops) j["tflop_per_s"] = s.family->flops(s.problem) / seconds / 1e12;
    if (rates.peak) j["peak_bandwidth_fraction"] = s.family->bytes(s.problem) / (s.peak_bandwidth_gbs * 1e9) / seconds;
    if (def) j["speedup_over_default"] = *def / e.median_ms;
    out.push_back(j);
  }
  return out;
}

std::vector<FailureKind> failure_kinds(const std::vector<Evaluation>& evaluations) {
  std::vector<FailureKind> kinds;
  for (const auto& e : evaluations) {
    if (e.ok) continue;
    const std::string kind = e.failure.substr(0, e.failure.find(':'));
    auto it = std::find_if(kinds.begin(), kinds.end(), [&](const FailureKind& k) { return k.kind == kind; });
    if (it == kinds.end()) it = kinds.insert(kinds.end(), {kind, 0, &e});
    ++it->count;
  }
  std::stable_sort(kinds.begin(), kinds.end(), [](const auto& a, const auto& b) { return a.count > b.count; });
  return kinds;
}

namespace {
/// `text` cut to at most `max` bytes, ending in "..." where it was cut.
std::string shortened(const std::string& text, std::size_t max) {
  return text.size() <= max ? text : text.substr(0, max - 3) + "...";
}
}  // namespace

std::string failure_digest(const std::vector<Evaluation>& evaluations) {
  const auto kinds = failure_kinds(evaluations);
  if (kinds.empty()) return "";
  const Evaluation* first = nullptr;
  for (const auto& e : evaluations)
    if (!e.ok && !first) first = &e;
  std::string out;
  for (const auto& k : kinds) out += fmt::format("{}{} {}", out.empty() ? "" : ", ", k.count, k.kind);
  return fmt::format("{} ({})", out, shortened(first->failure, 160));
}

std::string failure_table(const std::vector<Evaluation>& evaluations) {
  const auto kinds = failure_kinds(evaluations);
  if (kinds.empty()) return "";
  Table table({{"failed", true}, {"first config", false}, {"its reason", false}});
  for (const auto& k : kinds)
    table.add({std::to_string(k.count), k.first->config.str(), shortened(k.first->failure, 200)});
  return table.str();
}

nlohmann::json failure_json(const std::vector<Evaluation>& evaluations) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& k : failure_kinds(evaluations))
    out.push_back({{"kind", k.kind}, {"count", k.count}, {"first_config", k.first->config.to_json()},
                   {"first_reason", k.first->failure}});
  return out;
}

std::string summary_line(const SessionView& s) {
  std::size_t failed = 0;
  for (const auto& e : s.evaluations) failed += e.ok ? 0 : 1;
  const auto rows = ranked(s);
  std::string line = fmt::format("{} on {} ({}): {} evaluation{}, {} failed", s.family->name(), s.problem.key(),
                                 s.emulated() ? "host emulation" : s.backend, s.evaluations.size(),
                                 s.evaluations.size() == 1 ? "" : "s", failed);
  if (rows.empty())
    return line +
           (failed == 0 ? "; no config was measured" : "; none ran to the end: " + failure_digest(s.evaluations));
  // The search's times (the winner's line says how the finalists timed again compare).
  line += fmt::format("; fastest in the search {} at {:.4f} ms", rows.front()->config.str(), rows.front()->median_ms);
  if (const auto def = default_ms(s))
    line += fmt::format(", {:.2f}x the default's search time{}", *def / rows.front()->median_ms,
                        s.emulated() ? " in emulated host time (not a GPU result)" : "");
  return line;
}

std::string evaluation_line(std::size_t index, const Evaluation& e, bool emulated) {
  if (!e.ok) return fmt::format("#{} {} FAILED: {}", index, e.config.str(), e.failure);
  return fmt::format("#{} {} {:.4f} ms{} (p20 {:.4f}, p80 {:.4f})", index, e.config.str(), e.median_ms,
                     emulated ? " host (emulated)" : "", e.p20_ms, e.p80_ms);
}

}  // namespace ktune::cli
