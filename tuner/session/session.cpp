#include "tuner/session/session.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "base/env.hpp"
#include "base/error.hpp"
#include "base/files.hpp"
#include "base/json_input.hpp"
#include "base/json_output.hpp"
#include "search/stop.hpp"
#include "search/strategy.hpp"
#include "search/winner.hpp"
#include "tuner/compile/compile_ahead.hpp"
#include "tuner/compile/compiler.hpp"
#include "tuner/cuda/gpu_marks.hpp"
#include "tuner/cuda/timing.hpp"
#include "tuner/session/tuned_kernels.hpp"

namespace ktune::tuner {
namespace {

// A log line is the config and its run result in the runners' own JSON form.
nlohmann::json record_json(const Record& r) { return {{"config", r.config.to_json()}, {"result", to_json(r.result)}}; }

Record record_from_json(const nlohmann::json& j) {
  return {Config::from_json(j.at("config")), run_result_from_json(j.at("result"))};
}

/// What the finished session whose winner the log holds (`winner`, null where
/// none) measured when it timed `finalists` again: per finalist, its record
/// with that timing, or its failure (disqualified). nullopt where that
/// session's finalists were others (as another --finalists may make them)
/// or its log predates the records.
std::optional<std::vector<RunResult>> logged_timing(const nlohmann::json& winner,
                                                    const std::vector<Record>& finalists) {
  if (!winner.is_object() || !winner.contains("timed_again")) return std::nullopt;
  std::map<Config, RunResult> logged;
  for (const auto& j : winner["timed_again"]) {
    Record r = record_from_json(j);
    logged[r.config] = std::move(r.result);
  }
  for (const auto& j : winner.value("disqualified", nlohmann::json::array())) {
    RunResult failed;
    failed.failure = j.at("failure").get<std::string>();
    logged[Config::from_json(j.at("config"))] = failed;
  }
  if (logged.size() != finalists.size()) return std::nullopt;
  std::vector<RunResult> out;
  for (const Record& r : finalists) {
    const auto it = logged.find(r.config);
    if (it == logged.end() || (it->second.ok && !it->second.timing)) return std::nullopt;
    out.push_back(it->second);
  }
  return out;
}

/// The finalists timed again side by side, validation off, in two passes of half the repetitions each, the
/// second in the reverse order (A B C, then C B A): a clock or temperature drift over the re-timing falls alike
/// on the first finalists (the search's fastest) and the last (the default, the cache's config), where one pass
/// in order put all of it on the last. Per finalist, the passes' repetitions together; none for one that failed
/// when run again (flaky, racing, hanging), which goes into `disqualified` with that run's failure.
std::vector<std::optional<Measurement>> time_again(Runner& runner, const templates::Family& family,
                                                   const templates::Problem& problem, const RunOptions& run,
                                                   const std::vector<Record>& finalists,
                                                   std::vector<Record>& disqualified) {
  RunOptions again = run;
  again.validate = false;
  const auto half = [](int count, std::size_t pass) { return pass == 0 ? (count + 1) / 2 : count / 2; };
  std::array<RunOptions, 2> pass_options{again, again};
  for (std::size_t p = 0; p < 2; ++p) {
    pass_options[p].min_repetitions = half(run.min_repetitions, p);
    pass_options[p].max_repetitions = std::max(pass_options[p].min_repetitions, half(run.max_repetitions, p));
    pass_options[p].min_seconds = run.min_seconds / 2;
  }
  const std::size_t passes = pass_options[1].min_repetitions > 0 ? 2 : 1;  // one repetition asked: one pass
  const std::size_t n = finalists.size();
  std::vector<std::vector<Measurement>> measured(n);
  std::vector<bool> failed(n, false);
  for (std::size_t pass = 0; pass < passes; ++pass)
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t i = pass == 0 ? k : n - 1 - k;
      if (failed[i]) continue;
      const RunResult t = runner.run(family, finalists[i].config, problem, pass_options[pass]);
      if (!t.ok || !t.timing) {  // a config that fails when run again wins nothing
        failed[i] = true;
        disqualified.push_back({finalists[i].config, t});
        continue;
      }
      measured[i].push_back(*t.timing);
    }
  std::vector<std::optional<Measurement>> timing(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (failed[i]) continue;
    // The passes' repetitions together (a measurement that kept none stands as it is).
    std::vector<double> samples;
    for (const Measurement& m : measured[i]) samples.insert(samples.end(), m.samples_ms.begin(), m.samples_ms.end());
    const bool all_kept = std::all_of(measured[i].begin(), measured[i].end(),
                                      [](const Measurement& m) { return !m.samples_ms.empty(); });
    Measurement m = all_kept ? summarize(samples) : measured[i].front();
    for (const Measurement& pass : measured[i])  // the processes that shared the GPU during either pass
      add_unseen(m.shared_with, pass.shared_with);
    m.method = passes == 1 ? measured[i].front().method + ", timed again beside the other finalists"
                           : fmt::format("timed again beside the other finalists in two passes, the second in the "
                                         "reverse order, {} repetitions in all; each pass: {}",
                                         m.repetitions, measured[i].front().method);
    timing[i] = std::move(m);
  }
  return timing;
}

double time_of(const Record& r) {
  return r.result.ok && r.result.timing ? r.result.timing->median_ms : std::numeric_limits<double>::infinity();
}

/// A measurement's repetitions; its median alone when they were not kept
/// (results read back from a session log).
std::vector<double> samples_of(const Measurement& m) {
  return m.samples_ms.empty() ? std::vector<double>{m.median_ms} : m.samples_ms;
}

/// Why `best` won over `first`, the search's fastest (timed at `search_ms` there): slower timed again beside
/// the finalists, or within the noise of `who` ("the default ", "the cache's config ", or "" for a tie won by
/// space order), timed again or (`again` false) as the search timed them.
/// `first` and `best` tied: `intervals` names the intervals of their medians the winner rule compared.
std::string kept_note(const Record& first, const Record& best, const std::string& who, bool tied, bool again,
                      double search_ms, const std::string& intervals) {
  const Measurement& a = *first.result.timing;
  const Measurement& b = *best.result.timing;
  const std::string times = fmt::format("{:.4f} ms (p20-p80 {:.4f}-{:.4f})", a.median_ms, a.p20_ms, a.p80_ms);
  const std::string other = fmt::format("{}{} ({:.4f} ms, p20-p80 {:.4f}-{:.4f})", who, best.config.str(),
                                        b.median_ms, b.p20_ms, b.p80_ms);
  if (!tied)
    return fmt::format("{}, the fastest in the search at {:.4f} ms, timed again beside the finalists at {}, is slower "
                       "than {}, which wins",
                       first.config.str(), search_ms, times, other);
  return fmt::format("{}, the fastest in the search, {} {}, is not measurably faster than {}{}: within the noise of "
                     "their repetitions{}, {}",
                     first.config.str(), again ? "timed again beside the finalists at" : "at", times, other,
                     again ? "" : " as the search timed them (stopped before the finalists were timed again)",
                     intervals.empty() ? "" : " (" + intervals + ")",
                     who.empty() ? "and that one, first in the space of those tied, wins" : "that one stays");
}

/// A session's log, written from its first result on: a session that ends
/// before one (a reference that fails, a stop at once) leaves the file where
/// it was, and the earlier default log it would keep (`keep_as`) in place.
/// The header is held until then.
class SessionLog {
 public:
  SessionLog(const std::string& path, bool truncate, std::string keep_as)
      : path_(path), truncate_(truncate), keep_as_(std::move(keep_as)) {}
  void header(const nlohmann::json& j) { header_ = j; }
  /// Appends one line and flushes it to disk before the session goes on.
  void append(const nlohmann::json& j) {
    if (path_.empty()) return;
    if (!out_.is_open()) open();
    write(j);
  }
  /// Where the earlier log went, once this one was written ("" before, or where none was kept).
  const std::string& kept() const { return kept_; }

 private:
  void open() {
    if (!keep_as_.empty()) {
      keep_generations(keep_as_);
      std::error_code ec;
      std::filesystem::rename(path_, keep_as_, ec);
      if (ec)
        throw_error(ErrorKind::kIo, fmt::format("cannot keep the previous session log {} as {}: {}", path_, keep_as_,
                                                ec.message()));
      kept_ = keep_as_;
    }
    if (!truncate_) drop_torn_tail(path_);
    out_.open(open_target(path_, "session log"), truncate_ ? std::ios::trunc : std::ios::app);  // its folder made
    KTUNE_REQUIRE(out_.good(), "cannot open session log " + path_);
    if (!header_.is_null()) write(header_);
  }
  void write(const nlohmann::json& j) {
    out_ << dump_json(j) << "\n";  // a failure may quote a compiler's log, in whatever encoding the source is
    out_.flush();
    if (!out_) throw_error(ErrorKind::kIo, fmt::format("cannot write session log {}: {}", path_, std::strerror(errno)));
  }

  /// An earlier log kept at `path` (<name>.previous.log) moves to
  /// <name>.previous.2.log, and one there to .3, and so on: a log kept is
  /// never written over, however many sessions start anew.
  static void keep_generations(const std::string& path) {
    namespace fs = std::filesystem;
    if (!fs::exists(path)) return;
    const std::string stem = path.substr(0, path.rfind(".log"));
    const auto generation = [&](int n) { return fmt::format("{}.{}.log", stem, n); };
    int free = 2;
    while (fs::exists(generation(free))) ++free;
    for (int n = free; n >= 2; --n) {
      const std::string from = n == 2 ? path : generation(n - 1);
      std::error_code ec;
      fs::rename(from, generation(n), ec);
      if (ec)
        throw_error(ErrorKind::kIo,
                    fmt::format("cannot keep the earlier session log {} as {}: {}", from, generation(n), ec.message()));
    }
  }
  /// Ends a log's last line where it has no end, so that the next line
  /// appended is not glued to it, both unreadable from then on: a line that
  /// reads whole (a file edited, a kill between a record and its newline)
  /// gets its newline, as the resumed session read it; one a kill cut short
  /// (the resumed session read past it, its evaluation to run again) is cut.
  static void drop_torn_tail(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return;
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    if (text.empty() || text.back() == '\n') return;
    const std::size_t keep = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
    if (nlohmann::json::parse(text.substr(keep), nullptr, false).is_object()) {
      std::ofstream(path, std::ios::binary | std::ios::app) << '\n';
      return;
    }
    std::error_code ec;
    std::filesystem::resize_file(path, keep, ec);
    if (ec)
      throw_error(ErrorKind::kIo, fmt::format("cannot cut the torn last line of session log {}: {}", path,
                                              ec.message()));
  }

  std::string path_;
  bool truncate_;
  std::string keep_as_;
  std::string kept_;
  nlohmann::json header_;
  std::ofstream out_;
};

/// Why a log whose session header is `logged` holds no results this session
/// (whose header is `session`) can take over: another family or problem,
/// or results another backend, device or kernel source gave; nullopt if it
/// can be resumed.
std::optional<std::string> not_resumable(const std::string& path, const nlohmann::json& logged,
                                         const nlohmann::json& session) {
  if (logged.value("family", "") != session.value("family", "") ||
      logged.value("problem", "") != session.value("problem", ""))
    return fmt::format("session log {} is for {} on {}, not {} on {}", path, logged.value("family", ""),
                       logged.value("problem", ""), session.value("family", ""), session.value("problem", ""));
  // A log without a key (an older ktune's) is taken as this session's there.
  for (const std::string key : {"backend", "gpu", "arch", "source_hash", "nvrtc", "shard"}) {
    const nlohmann::json& value = logged.contains(key) ? logged[key] : session.at(key);
    const std::string named = key == "source_hash" ? "kernel source" : key == "nvrtc" ? "NVRTC" : key;
    if (value != session.at(key))
      return fmt::format("session log {} holds results of {} {}, this session's {} is {}: they are not its results",
                         path, named, value.dump(), named, session.at(key).dump());
  }
  return std::nullopt;
}

/// `header` is the log's last session header (null where a missing or
/// empty file holds none); `winner` the winner its last session logged where
/// no result follows it (null where none: a stop before the finalists, or
/// results a later session added); a file whose first line is not one is refused, as
/// no session's log, before anything is appended to it; and so is a log of
/// another family or problem, or whose results another backend, device or
/// kernel source gave than `session` (this session's header) says. `order`
/// gains the results' configs in the log's order.
std::map<Config, Record> read_log(const std::string& path, const templates::Family& family,
                                  const templates::Problem& problem, const nlohmann::json& session,
                                  nlohmann::json& header, nlohmann::json& winner, UnreadableLines& unreadable,
                                  std::vector<Config>& order) {
  std::map<Config, Record> out;
  header = nullptr;
  winner = nullptr;
  unreadable = {};
  std::ifstream in(path);
  if (!in) return out;
  std::size_t number = 0, pending = 0;  // pending: an unreadable line no other has followed yet
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error&) {
      if (!header.is_null()) {  // a line cut short: that evaluation runs again
        if (pending > 0 && unreadable.count++ == 0) unreadable.first = pending;
        pending = number;
        continue;
      }
    }
    if (pending > 0 && unreadable.count++ == 0) unreadable.first = pending;
    pending = 0;
    if (header.is_null()) {
      KTUNE_REQUIRE(j.is_object() && j.contains("session"),
                    fmt::format("{} is not a ktune session log (its first line is no session header); give the log "
                                "of the session to resume, or leave out --resume",
                                path));
    }
    if (j.contains("session")) {
      header = j["session"];
      if (const auto why = not_resumable(path, header, session))
        throw_error(ErrorKind::kInvalidInput, *why + "; give another --log (or remove it) to start anew");
      continue;
    }
    if (j.contains("winner")) {  // a finished session's pick: the results are the evaluations
      winner = j["winner"];
      continue;
    }
    winner = nullptr;  // a result after it: the session that logged it did not finish
    Record r = record_from_json(j);
    r.resumed = true;
    order.push_back(r.config);
    out[r.config] = r;
  }
  unreadable.last_cut = pending > 0;
  return out;
}

// The first non-empty line of `path` (empty where it has none), and whether another follows it.
std::pair<std::string, bool> log_header(const std::string& path) {
  std::ifstream in(path);
  std::string line, header;
  int lines = 0;
  while (lines < 2 && std::getline(in, line))
    if (!line.empty() && ++lines == 1) header = line;
  return {header, lines == 2};
}

/// Where a fresh session logs (without --resume): a file that is no
/// session's log (a checkpoint, notes) is refused, as the new log would
/// replace it; one that holds results (more than its header) is refused
/// when it is the user's own --log, as a checkpoint is without --resume, and
/// kept as `<name>.previous.log` when it is a default log (an earlier one
/// kept there moving to `<name>.previous.2.log`, and so on), so a run
/// without --resume loses no earlier session's measurements.
/// Returns where a kept log goes once the session writes its first result
/// (SessionLog), "" if none is kept.
std::string fresh_log_keeps(const std::string& path, bool default_log, const nlohmann::json& session) {
  const auto [header, results] = log_header(path);
  if (header.empty()) return "";  // none, or empty
  const auto j = nlohmann::json::parse(header, nullptr, false);
  KTUNE_REQUIRE(j.is_object() && j.contains("session") && j["session"].is_object(),
                fmt::format("{} is not a ktune session log (its first line is no session header), and a new "
                            "session's log would replace it; give another path for the log",
                            path));
  if (!results) return "";  // a header alone: nothing to keep
  if (!default_log) {
    // One --resume could not take over (another kernel, problem, source, device): say only what can be done.
    if (const auto why = not_resumable(path, j["session"], session))
      throw_error(ErrorKind::kInvalidInput, *why + "; give another --log (or remove it) to start anew");
    throw_error(ErrorKind::kInvalidInput,
                fmt::format("--log {} holds the results of a session of {} on {}: give --resume to go on from it, or "
                            "remove it (or give another --log) to start anew",
                            path, j["session"].value("family", "?"), j["session"].value("problem", "?")));
  }
  return path.substr(0, path.rfind(".log")) + ".previous.log";
}

/// The results in the log at `path` where its last session ended before its
/// winner (a kill, a crash, a stop before the finalists; a resumed session
/// after a finished one's winner included) and this session (`session`)
/// could go on from them with --resume; nullopt where it finished or could
/// not be resumed.
std::optional<std::size_t> unfinished_results(const std::string& path, const nlohmann::json& session) {
  std::ifstream in(path);
  std::string line;
  std::size_t results = 0, since_winner = 0;
  nlohmann::json header;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object()) continue;  // a torn line
    if (j.contains("winner")) {
      since_winner = 0;
    } else if (j.contains("session")) {
      if (header.is_null()) header = j["session"];
    } else {
      ++results;
      ++since_winner;
    }
  }
  if (header.is_null() || since_winner == 0 || not_resumable(path, header, session)) return std::nullopt;
  return results;
}

/// The budget, or sooner where `should_stop` says so (a stop signal): the
/// search ends before its next evaluation. `spent` adds to the search's state
/// what the budget also counts (a resumed log's results the search has not
/// asked for).
class Interruptible final : public search::StopCondition {
 public:
  using Spent = std::function<search::SearchState(const search::SearchState&)>;
  Interruptible(const search::StopCondition& budget, std::function<bool()> should_stop, Spent spent)
      : budget_(budget), should_stop_(std::move(should_stop)), spent_(std::move(spent)) {}
  bool done(const search::SearchState& s) const override { return budget_.done(spent_(s)) || interrupted(); }
  double progress(const search::SearchState& s) const override { return budget_.progress(spent_(s)); }
  search::SearchState spent(const search::SearchState& s) const override { return spent_(s); }
  std::string describe() const override { return budget_.describe(); }
  bool interrupted() const { return should_stop_ && should_stop_(); }

 private:
  const search::StopCondition& budget_;
  std::function<bool()> should_stop_;
  Spent spent_;
};

/// The search's view of a runner: each evaluation a validated, timed run,
/// logged as it arrives, answered from the resumed log when it is there.
class SessionEvaluator final : public search::Evaluator {
 public:
  /// `logged_order`: the configs of `done` in the order the log holds them.
  SessionEvaluator(const templates::Family& f, const templates::Problem& p, Runner& runner, RunOptions run,
                   std::map<Config, Record> done, const std::vector<Config>& logged_order, SessionLog& log)
      : family_(f), problem_(p), runner_(runner), run_(run), done_(std::move(done)), log_(log) {
    for (const auto& [c, r] : done_) {
      from_log_.insert(c);
      unasked_.evaluations += 1;
      unasked_.failures += outcome_of(r).ok ? 0 : 1;
      unasked_.cost_s += outcome_of(r).cost_s;
    }
    // The log's best and how many results it holds after it, as the session that logged them counted.
    std::set<Config> seen;
    for (const Config& c : logged_order) {
      const auto it = done_.find(c);
      if (it == done_.end() || !seen.insert(c).second) continue;
      const search::Outcome o = outcome_of(it->second);
      if (o.ok && o.time_ms < logged_best_ms_) {
        logged_best_ms_ = o.time_ms;
        logged_since_ = 0;
      } else {
        ++logged_since_;
      }
    }
  }

  const Space& space() const override { return family_.space(); }
  std::uint64_t valid_points() const override {
    if (!valid_points_) {  // a fraction of a second for the largest space, once
      std::uint64_t n = 0;
      for (std::uint64_t i = 0; i < family_.space().size(); ++i) n += is_valid(family_.space().at(i), nullptr) ? 1 : 0;
      valid_points_ = n;
    }
    return *valid_points_;
  }
  bool is_valid(const Config& c, std::string* why) const override {
    if (shard_count_ > 1 && family_.space().index_of(c).value_or(0) % shard_count_ != shard_index_) {
      if (why) *why = "in another shard";
      return false;
    }
    if (deterministic_ && !family_.deterministic(c)) {
      if (why) *why = "sums by atomics, in no fixed order (--deterministic)";
      return false;
    }
    return family_.is_valid(c, problem_, runner_.device(), why);
  }
  void set_shard(std::uint64_t index, std::uint64_t count) {
    KTUNE_REQUIRE(count >= 1 && index < count, "--shard i/n needs 0 <= i < n");
    shard_index_ = index;
    shard_count_ = count;
  }
  void set_deterministic(bool deterministic) { deterministic_ = deterministic; }
  search::Outcome evaluate(const Config& c) override { return outcome_of(record(c)); }

  /// The run of `c`: from the log when resumed, else a fresh run.
  const Record& record(const Config& c) {
    if (auto it = done_.find(c); it != done_.end()) {
      if (from_log_.erase(c)) {
        ++resumed_count;
        const search::Outcome o = outcome_of(it->second);
        unasked_.evaluations -= 1;
        unasked_.failures -= o.ok ? 0 : 1;
        unasked_.cost_s = from_log_.empty() ? 0 : unasked_.cost_s - o.cost_s;
      }
      return it->second;
    }
    const auto start = std::chrono::steady_clock::now();
    ++fresh_count;
    Record r{c, runner_.run(family_, c, problem_, run_)};
    r.result.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    compile_ms += r.result.compile_ms;
    log_.append(record_json(r));
    return done_.emplace(c, std::move(r)).first->second;
  }
  const std::map<Config, Record>& done() const { return done_; }
  /// `s` with the logged results the search has not asked for added: a
  /// budget is the session's, the log's results and their time included.
  search::SearchState with_unasked(search::SearchState s) const {
    // Evaluations since the best improved count the log's after its best, then this session's runs, until this
    // session beats it (a plateau budget is the session's, the log's results included).
    if (!(s.best_ms < logged_best_ms_)) {
      s.since_improvement = logged_since_ + fresh_count;
      s.best_ms = logged_best_ms_;
    }
    s.evaluations += unasked_.evaluations;
    s.failures += unasked_.failures;
    s.cost_s += unasked_.cost_s;
    return s;
  }
  /// The logged results the search has not asked for, in config order.
  std::vector<Config> unasked() const { return {from_log_.begin(), from_log_.end()}; }
  std::uint64_t resumed_count = 0;
  std::uint64_t fresh_count = 0;  ///< the runs this session made (none answered from the log)
  double compile_ms = 0;  ///< of the evaluations this session ran: the compiles they waited for

 private:
  double logged_best_ms_ = std::numeric_limits<double>::infinity();  ///< the log's fastest result
  std::uint64_t logged_since_ = 0;  ///< the log's results after it
  static search::Outcome outcome_of(const Record& r) {
    search::Outcome o;
    o.ok = r.result.ok && r.result.timing.has_value();
    o.failure = r.result.failure;
    o.compile_s = r.result.compile_ms * 1e-3;
    if (r.result.timing) {
      o.time_ms = r.result.timing->median_ms;
      o.p20_ms = r.result.timing->p20_ms;
      o.p80_ms = r.result.timing->p80_ms;
      o.samples_ms = r.result.timing->samples_ms;
    }
    // A time budget is wall time: everything the evaluation took. A record
    // from an older log without it falls back to compile plus timed runs.
    if (r.result.wall_ms > 0) {
      o.cost_s = r.result.wall_ms * 1e-3;
    } else {
      if (r.result.timing) o.cost_s = r.result.timing->median_ms * r.result.timing->repetitions * 1e-3;
      o.cost_s += r.result.compile_ms * 1e-3;
    }
    return o;
  }

  const templates::Family& family_;
  const templates::Problem& problem_;
  Runner& runner_;
  RunOptions run_;
  std::map<Config, Record> done_;
  std::set<Config> from_log_;  // logged results not yet asked for
  search::SearchState unasked_;  // their count, failures and cost
  mutable std::optional<std::uint64_t> valid_points_;
  std::uint64_t shard_index_ = 0, shard_count_ = 1;
  bool deterministic_ = false;
  SessionLog& log_;
};

}  // namespace

double TuneSummary::speedup_over_default() const {
  if (!best || !default_run) return 0;
  return time_of(*default_run) / time_of(*best);
}

TuneSummary tune(const templates::Family& family, const templates::Problem& problem, Runner& runner,
                 const TuneOptions& options, const Progress& progress) {
  family.check(problem);
  const auto start = std::chrono::steady_clock::now();
  const auto& device = runner.device();
  auto stop = options.budget.empty() ? std::make_unique<search::Unbounded>() : search::parse_budget(options.budget);
  // One session writes a log at a time. A default log another session
  // holds is left to it: this one logs beside it, under its process's id.
  std::string log_path = options.log_path;
  std::optional<FileLock> held;
  if (!log_path.empty()) {
    // A device, folder or read-only file: refused before any lock or read. The default log's folder is the cache
    // folder's, which the user named only through KTUNE_CACHE_DIR (if at all): the message says so.
    writable_target(log_path, "session log",
                    options.default_log ? "the default log goes under the cache folder (KTUNE_CACHE_DIR): set "
                                          "KTUNE_CACHE_DIR to a folder ktune may write, or give --log"
                                        : kWritableAdvice);
    try {
      held.emplace(lock_path(log_path), "session log " + log_path);
    } catch (const Error& e) {
      if (!options.default_log || options.resume || e.kind() != ErrorKind::kInvalidInput) throw;
      log_path = fmt::format("{}.{}.log", log_path.substr(0, log_path.rfind(".log")), ::getpid());
      held.emplace(lock_path(log_path), "session log " + log_path);
    }
  }
  // The default (the valid config nearest it where it does not fit the
  // device) goes first, within the budget: every speed-up is measured
  // against it. A space with no valid config is refused here, before the
  // log is touched.
  const Config def = session_default(family, problem, device, options.deterministic);
  nlohmann::json session = {
      {"family", family.name()}, {"problem", problem.key()}, {"arch", device.arch}, {"gpu", device.name},
      {"backend", runner.backend()}, {"source_hash", family.source_hash()}, {"nvrtc", nvrtc_version()},
      {"shard", fmt::format("{}/{}", options.shard_index, options.shard_count)}, {"strategy", options.strategy},
      {"seed", options.seed}, {"problem_json", problem.to_json()}, {"peak_bandwidth_gbs", device.peak_bandwidth_gbs}};
  if (options.deterministic) session["deterministic"] = true;
  nlohmann::json header, finished;
  UnreadableLines unreadable;
  std::vector<Config> logged_order;
  std::map<Config, Record> done =
      options.resume ? read_log(log_path, family, problem, session, header, finished, unreadable, logged_order)
                     : std::map<Config, Record>{};
  if (options.deterministic) std::erase_if(done, [&](const auto& d) { return !family.deterministic(d.first); });
  if (const std::string note = unreadable_note(log_path, unreadable, "their evaluations run again");
      !note.empty() && options.on_note)
    options.on_note(note);
  const std::string keep = options.resume ? "" : fresh_log_keeps(log_path, options.default_log, session);
  if (const auto results = keep.empty() ? std::nullopt : unfinished_results(log_path, session);
      results && options.on_note)
    options.on_note(fmt::format("{} holds {} result{} of a session of this kernel that ended before its winner; this "
                                "one starts anew and keeps that log as {} (the same command with --resume goes on "
                                "from its results instead)",
                                log_path, *results, *results == 1 ? "" : "s", keep));
  // The config the cache holds goes second: every speed-up is measured against it too. A resumed session puts
  // there what the session it goes on with did (its header's), so that its search takes the same path: the
  // cache's entry may be that session's own best so far by now. Another entry is measured after the search.
  std::optional<Config> second = options.incumbent;
  if (options.resume && header.is_object() && header.contains("incumbent"))
    second = header["incumbent"].is_null() ? std::nullopt
                                           : std::optional<Config>(Config::from_json(header["incumbent"]));
  session["incumbent"] = second ? second->to_json() : nlohmann::json();
  SessionLog log(log_path, !options.resume, keep);
  // A resumed session that searches otherwise (another strategy or seed)
  // logs its own header after the results it takes over.
  if (header.is_null() || header.value("strategy", "") != options.strategy ||
      header.value("seed", std::uint64_t{0}) != options.seed ||
      header.value("deterministic", false) != options.deterministic)
    log.header({{"session", session}});
  RunOptions run = options.run;
  run.seed = options.seed;
  SessionEvaluator evaluator(family, problem, runner, run, std::move(done), logged_order, log);
  evaluator.set_shard(options.shard_index, options.shard_count);
  evaluator.set_deterministic(options.deterministic);

  TuneSummary summary;
  summary.log_path = log_path;
  // After the default, the family's candidates that the device can run (in
  // this session's shard).
  std::vector<Config> first = {def};
  const auto runnable = [&](const std::optional<Config>& c) {
    return c && *c != def && family.space().index_of(*c) && evaluator.is_valid(*c, nullptr);
  };
  const bool incumbent = runnable(options.incumbent);
  if (runnable(second)) first.push_back(*second);
  for (const Config& c : family.candidates(problem))
    if (std::find(first.begin(), first.end(), c) == first.end() && evaluator.is_valid(c, nullptr))
      first.push_back(c);

  auto strategy = search::make_strategy(options.strategy, {&family.space(), &evaluator, options.seed});
  // While the GPU measures a variant, a process of its own compiles the
  // candidates not yet measured, and from the last of them on what the
  // strategy expects to propose next.
  std::unique_ptr<CompileAhead> ahead;
  if (options.compile_ahead_threads > 0 && runner.backend() == "gpu")
    ahead = std::make_unique<CompileAhead>(family, problem, device.arch, options.compile_ahead_threads);
  const auto compile_ahead = [&] {
    if (!ahead) return;
    const auto measured = [&](const Config& c) { return evaluator.done().count(c) > 0; };
    std::vector<Config> hint(first.begin() + 1, first.end());
    std::erase_if(hint, measured);
    if (hint.size() <= 1)
      for (Config& c : strategy->upcoming(2 * options.compile_ahead_threads + 1))
        if (!measured(c)) hint.push_back(std::move(c));
    ahead->add(hint);
  };
  compile_ahead();
  const Record* last = nullptr;
  search::SearchCallbacks callbacks;
  callbacks.on_record = [&](const search::Record& r) {
    last = &evaluator.record(r.config);
    summary.records.push_back(r);
  };
  callbacks.on_progress = [&](const search::Progress& p) {
    compile_ahead();
    if (progress && last) progress(*last, p);
  };
  // A resumed log's results count against the budget before the search
  // asks for them (another strategy or seed may never ask for some): a
  // resumed session ends where the whole one would have, and its progress
  // counts them, their cost in its ETA.
  const Interruptible until(*stop, options.should_stop,
                            [&](const search::SearchState& s) { return evaluator.with_unasked(s); });
  const search::SearchResult found = search::run_search(evaluator, *strategy, until, callbacks, first);
  const bool interrupted = until.interrupted();
  // The cache's config competes where the search did not propose it within its budget: measured now, and counted.
  const bool incumbent_late = incumbent && !interrupted && !evaluator.done().count(*options.incumbent);
  if (incumbent_late) evaluator.record(*options.incumbent);
  // The cache's entry is replaced only where its config competed: measured here (by this session or its log),
  // or no longer valid here. One a stop or another shard left unmeasured stays unless the winner beats it.
  summary.incumbent_competed = !options.incumbent || evaluator.done().count(*options.incumbent) > 0 ||
                               !family.space().index_of(*options.incumbent) ||
                               !family.is_valid(*options.incumbent, problem, device, nullptr);
  summary.stopped_by = interrupted ? "a stop signal" : found.stopped_by;
  const search::SearchState spent = evaluator.with_unasked(found.state);
  // The logged results the search did not ask for are the session's too: in its count and its records.
  for (const Config& c : evaluator.unasked())
    summary.records.push_back({summary.records.size(), c, evaluator.evaluate(c)});
  if (incumbent_late)
    summary.records.push_back({summary.records.size(), *options.incumbent, evaluator.evaluate(*options.incumbent)});
  summary.resumed = evaluator.resumed_count;
  summary.valid_points = evaluator.valid_points();
  summary.compile_seconds = evaluator.compile_ms / 1e3;
  summary.evaluations = spent.evaluations + (incumbent_late ? 1 : 0);
  summary.failures = spent.failures + (incumbent_late && !summary.records.back().outcome.ok ? 1 : 0);
  for (const auto& r : summary.records)
    summary.pruned += r.outcome.failure.rfind("pruned:", 0) == 0 ? 1 : 0;
  if (const auto it = evaluator.done().find(def); it != evaluator.done().end()) summary.default_run = it->second;

  // The fastest few are timed again side by side, with the default and the
  // cache's config for the problem, and the winner rule judges those samples
  // alone (the search's were taken at other times, the default's first of
  // all): it ties what noise cannot separate and gives a tie to the cache's
  // config (only a measurably faster one replaces it), then to the default
  // (nothing measurably faster replaces it), else to the smallest space
  // index, so two sessions on one GPU pick the same config.
  const auto timed = [](const Record& r) { return time_of(r) < std::numeric_limits<double>::infinity(); };
  // Every result the session holds competes: this run's, and a resumed log's
  // that its strategy did not propose again.
  std::vector<Record> ranked;
  for (const auto& [config, r] : evaluator.done())
    if (timed(r)) ranked.push_back(r);
  std::sort(ranked.begin(), ranked.end(), [](const Record& a, const Record& b) {
    return time_of(a) != time_of(b) ? time_of(a) < time_of(b) : a.config < b.config;
  });
  if (ranked.empty()) {
    summary.previous_log = log.kept();
    summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return summary;
  }
  ranked.resize(std::min<std::size_t>(ranked.size(), static_cast<std::size_t>(std::max(1, options.finalists))));
  const auto join = [&](const Config& c) {
    const auto it = evaluator.done().find(c);
    if (options.finalists > 1 && it != evaluator.done().end() && timed(it->second) &&
        std::none_of(ranked.begin(), ranked.end(), [&](const Record& r) { return r.config == c; }))
      ranked.push_back(it->second);
  };
  join(def);
  if (incumbent) join(*options.incumbent);
  // The search's fastest config that sums in a fixed order (Family::deterministic) is a finalist too: where the
  // winner does not, a deterministic run takes the fastest of those that do. In families all of whose configs sum
  // in a fixed order it is the search's fastest, a finalist already.
  const auto fixed_order = [&](const Record& r) { return family.deterministic(r.config); };
  // By the search's samples, of the configs `out` does not leave out.
  const auto fastest_fixed_order = [&](const auto& out) {
    std::optional<Record> found;
    for (const auto& [config, r] : evaluator.done())
      if (timed(r) && fixed_order(r) && !out(config) && (!found || time_of(r) < time_of(*found))) found = r;
    return found;
  };
  std::optional<Record> deterministic_found = fastest_fixed_order([](const Config&) { return false; });
  if (deterministic_found) join(deterministic_found->config);
  double search_ms = time_of(ranked.front());  // the search's fastest, before it is timed again
  // A resumed session that measured nothing new takes the finished session's timing of these very finalists
  // (also where a stop came meanwhile: it costs no run): timed again, they would give another winner by noise
  // alone.
  const auto from_log =
      evaluator.fresh_count == 0 && ranked.size() > 1 ? logged_timing(finished, ranked) : std::nullopt;
  if (ranked.size() > 1 && ((options.run.time && !interrupted) || from_log)) {
    const std::size_t n = ranked.size();
    summary.finalists_from_log = from_log.has_value();
    std::vector<std::optional<Measurement>> timing(n);  // none: disqualified
    if (from_log) {
      for (std::size_t i = 0; i < n; ++i)
        if ((*from_log)[i].ok)
          timing[i] = (*from_log)[i].timing;
        else
          summary.disqualified.push_back({ranked[i].config, (*from_log)[i]});
    } else {
      timing = time_again(runner, family, problem, run, ranked, summary.disqualified);
    }
    std::vector<Record> timed_again;
    for (std::size_t i = 0; i < n; ++i) {
      if (!timing[i]) continue;
      Record& r = ranked[i];
      if (timed_again.empty()) search_ms = time_of(r);
      r.result.timing = std::move(timing[i]);
      r.resumed = from_log.has_value();  // else timed by this session
      summary.finalists.push_back(r);
      timed_again.push_back(r);
    }
    ranked = std::move(timed_again);
    const auto out = [&](const Config& c) {
      return std::any_of(summary.disqualified.begin(), summary.disqualified.end(),
                         [&](const Record& d) { return d.config == c; });
    };
    if (deterministic_found && out(deterministic_found->config))  // the next that sums in a fixed order
      deterministic_found = fastest_fixed_order(out);
    if (ranked.empty()) {
      summary.previous_log = log.kept();
      summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      return summary;
    }
  }
  std::vector<search::Candidate> finalists;
  for (const auto& r : ranked) {
    if (r.config == def) summary.default_run = r;  // its speed-up from the same samples as the winner's
    const std::uint64_t order = incumbent && r.config == *options.incumbent ? 0
                                : r.config == def                           ? 1
                                : family.space().index_of(r.config).value_or(0) + 2;
    finalists.push_back({order, r.config, samples_of(*r.result.timing)});
  }
  const search::WinnerResult winner = search::pick_winner(finalists);
  summary.best = ranked[winner.found ? winner.winner : 0];
  if (!fixed_order(*summary.best)) {
    // The winner rule among the finalists that sum in a fixed order; the search's fastest of them where none is.
    std::vector<search::Candidate> fixed;
    std::vector<std::size_t> at;
    for (std::size_t i = 0; i < ranked.size(); ++i)
      if (fixed_order(ranked[i])) {
        fixed.push_back(finalists[i]);
        at.push_back(i);
      }
    const search::WinnerResult w = search::pick_winner(fixed);
    summary.best_deterministic = w.found ? std::optional<Record>(ranked[at[w.winner]]) : deterministic_found;
  }
  summary.tied = winner.tied;
  summary.evaluations_behind = summary.evaluations;
  if (incumbent && summary.best->config == *options.incumbent)
    summary.evaluations_behind =
        std::max<std::uint64_t>(summary.evaluations, static_cast<std::uint64_t>(options.incumbent_evaluations));
  // The search's fastest (ranked first) may be slower timed again, or tie with the cache's config or the
  // default, which win ties: said, or a table of the search's times reads as a contradiction.
  if (const Record& fastest = ranked.front(); fastest.config != summary.best->config) {
    const auto stats_of = [&](const Config& config) {
      return std::find_if(winner.ranked.begin(), winner.ranked.end(),
                          [&](const search::CandidateStats& c) { return ranked[c.candidate].config == config; });
    };
    const auto stats = stats_of(fastest.config), kept = stats_of(summary.best->config);
    std::string intervals;
    if (stats != winner.ranked.end() && kept != winner.ranked.end())
      intervals = fmt::format("the intervals of their medians the winner rule compares, {:.4f}-{:.4f} ms over {} "
                              "repetitions and {:.4f}-{:.4f} over {}, overlap",
                              stats->ci_low_ms, stats->ci_high_ms, stats->repetitions, kept->ci_low_ms,
                              kept->ci_high_ms, kept->repetitions);
    const std::string who = incumbent && summary.best->config == *options.incumbent ? "the cache's config "
                            : summary.best->config == def                          ? "the default "
                                                                                   : "";
    summary.kept_note = kept_note(fastest, *summary.best, who, stats != winner.ranked.end() && stats->tied,
                                  std::any_of(summary.finalists.begin(), summary.finalists.end(),
                                              [&](const Record& r) { return r.config == fastest.config; }),
                                  search_ms, intervals);
  }
  // The winner rule's pick, timed beside the finalists, goes into the log: `ktune log show` names it as tune did.
  const auto& picked = *summary.best->result.timing;
  nlohmann::json logged = {{"config", summary.best->config.to_json()}, {"time_ms", picked.median_ms},
                           {"p20_ms", picked.p20_ms},  {"p80_ms", picked.p80_ms},
                           {"tied", summary.tied},      {"stopped_by", summary.stopped_by},
                           {"finalists", finalists_json(summary)}};
  if (!summary.disqualified.empty()) logged["disqualified"] = disqualified_json(summary);
  if (const auto& fixed = summary.best_deterministic; fixed && fixed->result.timing)
    logged["deterministic"] = {{"config", fixed->config.to_json()}, {"time_ms", fixed->result.timing->median_ms}};
  // The finalists' records as timed again, repetitions and all: a resumed session that measures nothing new
  // judges them again rather than timing them again.
  logged["timed_again"] = nlohmann::json::array();
  for (const Record& r : summary.finalists) logged["timed_again"].push_back(record_json(r));
  // Judged again from the log's samples (or, with one finalist, from the log's results alone), the pick is the
  // log's own unless a tie now goes another way (another cache's config): the log names what went into the cache.
  const bool judged_from_log =
      summary.finalists_from_log || (evaluator.fresh_count == 0 && summary.finalists.empty() &&
                                     finished.is_object() && finished.contains("timed_again") &&
                                     finished["timed_again"].empty());
  const bool logged_pick = judged_from_log && finished.is_object() && finished.at("config") == logged["config"] &&
                           finished.value("deterministic", nlohmann::json()) ==
                               logged.value("deterministic", nlohmann::json());
  if (!logged_pick) log.append({{"winner", std::move(logged)}});
  summary.previous_log = log.kept();
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

std::string standing(const Record& last, const search::Progress& progress, const std::string& eta) {
  // The best time beside its own config; the last evaluation only where it failed.
  std::string best = "best none";
  if (progress.best && progress.state && std::isfinite(progress.state->best_ms))
    best = fmt::format("best {:.4f} ms {}", progress.state->best_ms, excerpt(progress.best->str(), 60));
  const std::string failed = last.result.ok ? ""
                                            : fmt::format("; last {} FAILED: {}", excerpt(last.config.str(), 60),
                                                          excerpt(last.result.failure, 60));
  return fmt::format("{}, {}{}", best, eta, failed);
}

nlohmann::json finalists_json(const TuneSummary& summary) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : summary.finalists)
    out.push_back({{"config", r.config.to_json()}, {"time_ms", r.result.timing->median_ms},
                   {"p20_ms", r.result.timing->p20_ms}, {"p80_ms", r.result.timing->p80_ms}});
  return out;
}

nlohmann::json disqualified_json(const TuneSummary& summary) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : summary.disqualified)
    out.push_back({{"config", r.config.to_json()}, {"failure", r.result.failure}});
  return out;
}

Config session_default(const templates::Family& family, const templates::Problem& problem,
                       const templates::DeviceLimits& device, bool deterministic) {
  return deterministic ? choose_config(family, problem, device, nullptr, nullptr, true).config
                       : default_on(family, problem, device);
}

bool take_incumbent(TuneOptions& options, const std::vector<cache::Entry>& entries, const templates::Family& family,
                    const templates::Problem& problem, const templates::DeviceLimits& device) {
  const cache::Key key = cache_key(family, problem, device);
  // The entry of this very key (of duplicates, the one a merge keeps), else the newest of this problem and GPU
  // under another source, NVRTC or driver: its config is worth measuring, but its search was of other code or
  // another driver, and its count of configs measured is not this key's.
  const cache::Entry* exact = nullptr;
  const cache::Entry* stale = nullptr;
  for (const auto& e : entries) {
    if (e.key.where() != key.where()) continue;
    try {
      (void)Config::from_json(e.config);
    } catch (const Error&) {  // not a config: the session's own configs decide
      continue;
    }
    if (e.key.identity() == key.identity()) {
      if (!exact || cache::better_than(e, *exact)) exact = &e;
    } else if (!stale || e.date > stale->date) {
      stale = &e;
    }
  }
  const cache::Entry* taken = exact ? exact : stale;
  if (!taken) return false;
  options.incumbent = Config::from_json(taken->config);
  if (options.deterministic && !family.deterministic(*options.incumbent) && taken->deterministic) {
    try {
      options.incumbent = Config::from_json(taken->deterministic->config);
    } catch (const Error&) {  // a pick that is no config: the entry's own config competes, as without one
    }
  }
  options.incumbent_evaluations = exact ? taken->evaluations : 0;
  return true;
}

std::string default_log_path(const templates::Family& family, const templates::Problem& problem,
                             std::uint64_t shard_index, std::uint64_t shard_count) {
  std::string tag = problem.key();  // "f32;numel=16384;tensors=4" -> "f32-numel16384-tensors4"
  std::replace(tag.begin(), tag.end(), ';', '-');
  tag.erase(std::remove(tag.begin(), tag.end(), '='), tag.end());
  if (shard_count > 1) tag += fmt::format(".shard{}of{}", shard_index, shard_count);
  return (env::session_log_dir() / (family.name() + "." + tag + ".log")).string();
}

bool log_holds_results(const std::string& path) { return log_header(path).second; }

SessionLogContents read_session_log(const std::string& path) {
  KTUNE_REQUIRE(!std::filesystem::is_directory(path),
                "session log " + path + " is a directory; give the log file of a session");
  std::ifstream in(path);
  KTUNE_REQUIRE(in.good(), "session log " + path + " does not exist or cannot be read");
  SessionLogContents out;
  std::size_t number = 0, pending = 0;  // pending: an unreadable line no other has followed yet
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (out.sessions.empty()) {  // the first line: a session's header, or the file is no session's log
      KTUNE_REQUIRE(j.is_object() && j.contains("session"),
                    fmt::format("{} is not a ktune session log (its first line is no session header)", path));
    }
    if (pending > 0 && out.unreadable.count++ == 0) out.unreadable.first = pending;
    pending = 0;
    if (j.is_discarded()) {  // a line cut short by a crash
      pending = number;
      continue;
    }
    try {
      if (j.contains("session")) {
        out.sessions.push_back(j["session"]);
      } else if (j.contains("winner")) {
        out.winner = j["winner"];
      } else {
        out.records.push_back(record_from_json(j));
      }
    } catch (const nlohmann::json::exception&) {
      throw_error(ErrorKind::kInvalidInput,
                  fmt::format("session log {} has a line that is not an evaluation: {}", path, excerpt(line)));
    }
  }
  KTUNE_REQUIRE(!out.sessions.empty(), "session log " + path + " is empty: no session header, no evaluation");
  out.unreadable.last_cut = pending > 0;
  return out;
}

std::string unreadable_note(const std::string& path, const UnreadableLines& unreadable, const std::string& then) {
  if (unreadable.count == 0) return "";
  return fmt::format("session log {}: skipped {} unreadable line{} (the first at line {}){}; {}", path,
                     unreadable.count, unreadable.count == 1 ? "" : "s", unreadable.first,
                     unreadable.last_cut ? ", and its last line, cut short" : "", then);
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
  e.evaluations = static_cast<std::int64_t>(summary.evaluations_behind);
  e.repetitions = t.repetitions;
  if (summary.best_deterministic && summary.best_deterministic->result.timing)
    e.deterministic = cache::DeterministicPick{summary.best_deterministic->config.to_json(),
                                               summary.best_deterministic->result.timing->median_ms};
  return e;
}

}  // namespace ktune::tuner
