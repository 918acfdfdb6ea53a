#include "tuner/session.hpp"

#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <map>

#include "base/error.hpp"
#include "base/files.hpp"
#include "search/strategy.hpp"
#include "tuner/compiler.hpp"

namespace ktune::tuner {
namespace {

nlohmann::json record_json(const Record& r) {
  nlohmann::json j = {{"config", r.config.to_json()}, {"ok", r.result.ok}, {"failure", r.result.failure},
                      {"max_error", r.result.max_error}, {"compile_ms", r.result.compile_ms}};
  if (r.result.timing) {
    const auto& t = *r.result.timing;
    j["time_ms"] = t.median_ms;
    j["p20_ms"] = t.p20_ms;
    j["p80_ms"] = t.p80_ms;
    j["repetitions"] = t.repetitions;
  }
  return j;
}

Record record_from_json(const nlohmann::json& j) {
  Record r;
  r.config = Config::from_json(j.at("config"));
  r.result.ok = j.at("ok").get<bool>();
  r.result.failure = j.value("failure", "");
  r.result.max_error = j.value("max_error", 0.0);
  if (j.contains("time_ms")) {
    Measurement m;
    m.median_ms = j["time_ms"].get<double>();
    m.p20_ms = j.value("p20_ms", m.median_ms);
    m.p80_ms = j.value("p80_ms", m.median_ms);
    m.repetitions = j.value("repetitions", 0);
    r.result.timing = m;
  }
  return r;
}

double time_of(const Record& r) {
  return r.result.ok && r.result.timing ? r.result.timing->median_ms : std::numeric_limits<double>::infinity();
}

/// Appends one line and flushes it to disk before the session goes on.
class SessionLog {
 public:
  explicit SessionLog(const std::string& path, bool truncate) : path_(path) {
    if (path.empty()) return;
    out_.open(path, truncate ? std::ios::trunc : std::ios::app);
    KTUNE_REQUIRE(out_.good(), "cannot open session log " + path);
  }
  void append(const nlohmann::json& j) {
    if (path_.empty()) return;
    out_ << j.dump() << "\n";
    out_.flush();
  }

 private:
  std::string path_;
  std::ofstream out_;
};

std::map<Config, Record> read_log(const std::string& path, const templates::Family& family,
                                  const templates::Problem& problem) {
  std::map<Config, Record> out;
  std::ifstream in(path);
  if (!in) return out;
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error&) {
      continue;  // a line cut short by a crash: that evaluation runs again
    }
    if (j.contains("session")) {
      KTUNE_REQUIRE(j["session"].value("family", "") == family.name() &&
                        j["session"].value("problem", "") == problem.key(),
                    fmt::format("session log {} is for {} on {}, not {} on {}", path, j["session"].value("family", ""),
                                j["session"].value("problem", ""), family.name(), problem.key()));
      continue;
    }
    Record r = record_from_json(j);
    out[r.config] = r;
  }
  return out;
}

/// The strategy's view of the family for this problem and device.
class ConstraintView final : public search::Evaluator {
 public:
  ConstraintView(const templates::Family& f, const templates::Problem& p, const templates::DeviceLimits& d)
      : family_(f), problem_(p), device_(d) {}
  const Space& space() const override { return family_.space(); }
  bool is_valid(const Config& c, std::string* why) const override {
    return family_.is_valid(c, problem_, device_, why);
  }
  search::Outcome evaluate(const Config&) override {
    throw_error(ErrorKind::kInternal, "ConstraintView does not evaluate");
  }

 private:
  const templates::Family& family_;
  const templates::Problem& problem_;
  const templates::DeviceLimits& device_;
};

search::Outcome outcome_of(const RunResult& r) {
  search::Outcome o;
  o.ok = r.ok && r.timing.has_value();
  o.failure = r.failure;
  if (r.timing) {
    o.time_ms = r.timing->median_ms;
    o.p20_ms = r.timing->p20_ms;
    o.p80_ms = r.timing->p80_ms;
  }
  return o;
}

}  // namespace

double TuneSummary::speedup_over_default() const {
  if (!best || !default_run) return 0;
  return time_of(*default_run) / time_of(*best);
}

TuneSummary tune(const templates::Family& family, const templates::Problem& problem, Runner& runner,
                 const TuneOptions& options, const Progress& progress) {
  family.check_problem(problem);
  const auto start = std::chrono::steady_clock::now();
  const auto& device = runner.device();
  std::map<Config, Record> done = options.resume ? read_log(options.log_path, family, problem)
                                                 : std::map<Config, Record>{};
  SessionLog log(options.log_path, !options.resume);
  if (!options.resume)
    log.append({{"session", {{"family", family.name()}, {"problem", problem.key()}, {"arch", device.arch},
                             {"gpu", device.name}, {"strategy", options.strategy}, {"seed", options.seed}}}});

  TuneSummary summary;
  RunOptions run = options.run;
  run.seed = options.seed;
  auto evaluate = [&](const Config& c) -> Record {
    if (auto it = done.find(c); it != done.end()) {
      ++summary.resumed;
      return it->second;
    }
    Record r{c, runner.run(family, c, problem, run)};
    log.append(record_json(r));
    done[c] = r;
    return r;
  };
  auto account = [&](const Record& r) {
    ++summary.evaluations;
    if (!r.result.ok) ++summary.failures;
    if (time_of(r) < (summary.best ? time_of(*summary.best) : std::numeric_limits<double>::infinity()))
      summary.best = r;
    if (progress) progress(r, summary);
  };

  const Config def = family.default_config(problem);
  summary.default_run = evaluate(def);
  account(*summary.default_run);

  ConstraintView view(family, problem, device);
  auto strategy = search::make_strategy(options.strategy, {&family.space(), &view, options.seed});
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  while ((options.max_evaluations == 0 || summary.evaluations < options.max_evaluations) &&
         (options.max_seconds <= 0 || elapsed() < options.max_seconds)) {
    const auto c = strategy->next();
    if (!c) break;
    if (*c == def) {
      strategy->report(*c, outcome_of(summary.default_run->result));
      continue;
    }
    const Record r = evaluate(*c);
    strategy->report(*c, outcome_of(r.result));
    account(r);
  }

  // Re-time the fastest few side by side and keep the fastest median, so a
  // lucky single measurement does not decide the winner.
  std::vector<Record> ranked;
  for (const auto& [c, r] : done)
    if (time_of(r) < std::numeric_limits<double>::infinity()) ranked.push_back(r);
  std::sort(ranked.begin(), ranked.end(), [](const Record& a, const Record& b) {
    return time_of(a) != time_of(b) ? time_of(a) < time_of(b) : a.config < b.config;
  });
  if (ranked.size() > 1 && options.finalists > 1 && options.run.time) {
    ranked.resize(std::min<std::size_t>(ranked.size(), static_cast<std::size_t>(options.finalists)));
    RunOptions again = run;
    again.validate = false;
    again.min_repetitions *= 2;
    for (auto& r : ranked) {
      const RunResult t = runner.run(family, r.config, problem, again);
      if (t.ok && t.timing) r.result.timing = t.timing;
    }
    std::sort(ranked.begin(), ranked.end(), [](const Record& a, const Record& b) {
      return time_of(a) != time_of(b) ? time_of(a) < time_of(b) : a.config < b.config;
    });
    summary.best = ranked.front();
  }
  summary.seconds = elapsed();
  return summary;
}

cache::Key cache_key(const templates::Family& family, const templates::Problem& problem,
                     const templates::DeviceLimits& device) {
  cache::Key k;
  k.family = family.name();
  k.source_hash = family.source_hash();
  k.problem_key = problem.key();
  k.dtype = problem.dtype;
  k.arch = device.arch;
  k.gpu_name = device.name;
  k.nvrtc_version = nvrtc_version();
  k.driver_version = std::to_string(device.driver_version);
  k.dims = problem.dims;
  return k;
}

cache::Entry cache_entry(const templates::Family& family, const templates::Problem& problem,
                         const templates::DeviceLimits& device, const TuneSummary& summary) {
  KTUNE_REQUIRE(summary.best && summary.best->result.timing, "the session found no working config to cache");
  const auto& t = *summary.best->result.timing;
  cache::Entry e;
  e.key = cache_key(family, problem, device);
  e.config = summary.best->config.to_json();
  e.time_ms = t.median_ms;
  e.p20_ms = t.p20_ms;
  e.p80_ms = t.p80_ms;
  e.spread = t.median_ms > 0 ? (t.p80_ms - t.p20_ms) / t.median_ms : 0;
  e.evaluations = static_cast<std::int64_t>(summary.evaluations);
  e.repetitions = t.repetitions;
  return e;
}

}  // namespace ktune::tuner
