// Tuning sessions on a scripted runner: failures are results, every result
// is logged as it arrives, --resume reuses the log, the winner is cached.
#include "tuner/session/session.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/files.hpp"
#include "cache/store.hpp"
#include "cache/tuned_cache.hpp"
#include "support.hpp"
#include "tuner/compile/compiler.hpp"
#include "tuner/session/tuned_kernels.hpp"

namespace tuner_session_session_test {

using namespace ktune;
using namespace ktune::tuner;
namespace fs = std::filesystem;

namespace {
/// Times follow a formula of the config (time_of); threads == 1024 fails to "launch".
class ScriptedRunner final : public Runner {
 public:
  std::string backend() const override { return "scripted"; }
  const DeviceLimits& device() const override { return device_; }
  RunResult run(const Family&, const Config& c, const Problem&, const RunOptions& o) override {
    ++calls;
    if (!refused.empty()) throw_error(ErrorKind::kInvalidInput, refused);  // as a spec's failing reference is
    seen.insert(c);
    order.push_back(c);
    RunResult r;
    if (c.has("threads") && c.at("threads") == 1024) {
      r.failure = failure;
      return r;
    }
    if (!o.validate && flaky.count(c)) {  // timed again after the search
      r.failure = "launch: CUDA_ERROR_LAUNCH_TIMEOUT";
      return r;
    }
    r.ok = true;
    if (o.time) {
      Measurement m;
      m.median_ms = time_of(c);
      m.p20_ms = m.median_ms * 0.99;
      m.p80_ms = m.median_ms * 1.01;
      m.repetitions = 10;
      if (noisy)  // ten repetitions within 2 % of the median
        for (int i = 0; i < m.repetitions; ++i) m.samples_ms.push_back(m.median_ms * (0.98 + 0.04 * i / 9));
      r.timing = m;
    }
    return r;
  }
  std::function<double(const Config&)> time_of = [](const Config& c) {
    return 1.0 + std::abs(c.at("threads") - 256) / 256.0 + (4 - c.at("vec")) * 0.1;
  };
  std::string failure = "launch: CUDA_ERROR_ILLEGAL_ADDRESS";  // of threads == 1024
  bool noisy = false;
  std::string refused;  // where set, every run throws it
  std::set<Config> flaky;  // pass in the search, fail when timed again
  int calls = 0;
  std::set<Config> seen;
  std::vector<Config> order;
  DeviceLimits device_ = DeviceLimits::for_arch("sm_90");
};
}  // namespace

TEST_CASE("an exhaustive session finds the fastest config and survives failing variants", "[session]") {
  const auto& family = templates::find_family("adamw_single");
  const Problem problem{"f32", {{"tensors", 2}, {"numel", 1000}}};
  ScriptedRunner runner;
  TuneOptions o;
  o.run.time = true;
  o.log_path = (test::scratch_dir("session") / "log.jsonl").string();
  const auto s = tune(family, problem, runner, o);
  REQUIRE(s.best);
  CHECK(s.best->config == Config({{"threads", 256}, {"vec", 4}}));
  CHECK(s.evaluations == family.space().size());
  CHECK(s.failures == 3);  // threads = 1024 with each vec
  CHECK(runner.seen.size() == family.space().size());
  std::ifstream log(o.log_path);
  int lines = 0;
  for (std::string l; std::getline(log, l);) ++lines;
  CHECK(lines == 2 + static_cast<int>(family.space().size()));  // header, one line per evaluation, the winner
  // The winner rule's pick reads back from the log, for `ktune log show`.
  const auto read = read_session_log(o.log_path);
  CHECK(read.records.size() == family.space().size());
  REQUIRE(read.winner.is_object());
  CHECK(Config::from_json(read.winner.at("config")) == s.best->config);
  CHECK(read.winner.at("time_ms") == s.best->result.timing->median_ms);
}

TEST_CASE("a failure that quotes a source line not in UTF-8 goes into the session log", "[session]") {
  const auto& family = templates::find_family("adamw_single");
  const Problem problem{"f32", {{"tensors", 2}, {"numel", 1000}}};
  ScriptedRunner runner;
  // A compiler's error quotes the line it is about, here with a Latin-1 comment.
  runner.failure = "compile: kernel.cu:4:21: error: '__fns' was not declared in this scope // caf\xe9";
  TuneOptions o;
  o.run.time = true;
  o.log_path = (test::scratch_dir("session") / "log.jsonl").string();
  const auto s = tune(family, problem, runner, o);
  CHECK(s.best);
  CHECK(s.failures == 3);
  const auto read = read_session_log(o.log_path);
  CHECK(read.records.size() == family.space().size());
}

TEST_CASE("a tie with the default goes to the default, judged on the same samples", "[session]") {
  // The configs of up to 256 threads are 0.1 % faster than the default (256 threads, 4 wide), inside the noise
  // of their measurements (repetitions 2 % either side): the default stays, though configs before it in the
  // space tie with it, and the speed-up over it is 1.
  const auto& family = templates::find_family("adamw_single");
  const Problem problem{"f32", {{"tensors", 2}, {"numel", 1000}}};
  const Config def = family.default_config(problem);
  REQUIRE(family.space().index_of(def).value_or(0) > 0);
  ScriptedRunner runner;
  runner.noisy = true;
  runner.time_of = [&](const Config& c) { return c == def ? 1.0 : c.at("threads") <= 256 ? 0.999 : 2.0; };
  TuneOptions o;
  o.run.time = true;
  o.finalists = 4;
  const auto s = tune(family, problem, runner, o);
  REQUIRE(s.best);
  CHECK(s.best->config == def);
  CHECK(s.tied > 1);
  CHECK(s.speedup_over_default() == Approx(1.0));
}

TEST_CASE("a resumed session reuses logged results and re-runs only the rest", "[session]") {
  const auto& family = templates::find_family("adamw_single");
  const Problem problem{"f32", {{"tensors", 2}, {"numel", 1000}}};
  TuneOptions o;
  o.run.time = true;
  o.finalists = 1;
  o.log_path = (test::scratch_dir("session") / "log.jsonl").string();
  {
    ScriptedRunner first;
    o.budget = "5";  // the default and four more, within the budget: a session stopped early, as by Ctrl-C
    const auto s = tune(family, problem, first, o);
    CHECK(first.calls == 5);
    CHECK(s.evaluations == 5);
  }
  // A crash may cut the last line short: that evaluation simply runs again.
  std::ofstream(o.log_path, std::ios::app) << "{\"config\":{\"thr";
  ScriptedRunner second;
  o.budget = "";
  o.resume = true;
  const auto s = tune(family, problem, second, o);
  CHECK(s.resumed == 5);
  CHECK(second.calls == static_cast<int>(family.space().size()) - 5);
  CHECK(s.best->config == Config({{"threads", 256}, {"vec", 4}}));
}

TEST_CASE("a session stopped and resumed with the cache's entry its own best so far measures what it would have "
          "measured uninterrupted",
          "[session]") {
  const auto& family = templates::find_family("swiglu_fwd");
  const Problem problem{"f32", {{"n", 1024}}};
  REQUIRE(family.space().size() > 40);
  TuneOptions o;
  o.run.time = true;
  o.finalists = 1;
  o.strategy = "annealing";
  o.seed = 3;
  const auto dir = test::scratch_dir("session-resume-path");
  o.log_path = (dir / "whole.jsonl").string();
  o.budget = "24";
  ScriptedRunner whole;
  tune(family, problem, whole, o);
  REQUIRE(whole.order.size() >= 24);
  // Stopped after 10 (a stop's session writes its best so far to the cache), then resumed with that entry.
  o.log_path = (dir / "stopped.jsonl").string();
  o.budget = "10";
  ScriptedRunner stopped;
  const TuneSummary first = tune(family, problem, stopped, o);
  REQUIRE(first.best);
  o.budget = "24";
  o.resume = true;
  o.incumbent = first.best->config;
  ScriptedRunner resumed;
  tune(family, problem, resumed, o);
  REQUIRE(resumed.order.size() >= 14);
  for (std::size_t i = 0; i < 14; ++i) {
    INFO(i);
    CHECK(resumed.order[i] == whole.order[10 + i]);
  }
}

TEST_CASE("a resumed session's winner is the fastest of every logged result, not only of those it proposed again",
          "[session]") {
  const auto& family = templates::find_family("adamw_single");
  const Problem problem{"f32", {{"tensors", 2}, {"numel", 1000}}};
  const Config def = family.default_config(problem);
  const auto fastest_at_128 = [](const Config& c) { return c.at("threads") == 128 && c.at("vec") == 2 ? 0.5 : 1.0; };
  TuneOptions o;
  o.run.time = true;
  o.strategy = "exhaustive";
  o.log_path = (test::scratch_dir("session-resume-best") / "log.jsonl").string();
  ScriptedRunner first;
  first.time_of = fastest_at_128;
  REQUIRE(tune(family, problem, first, o).best->config == Config({{"threads", 128}, {"vec", 2}}));
  // Resumed with a budget of one evaluation: the log's results have spent it, nothing is proposed.
  o.resume = true;
  o.strategy = "random";
  o.budget = "1";
  ScriptedRunner again;
  again.time_of = fastest_at_128;
  const auto s = tune(family, problem, again, o);
  CHECK(s.evaluations == family.space().size());
  REQUIRE(s.best);
  CHECK(s.best->config != def);
  CHECK(s.best->config == Config({{"threads", 128}, {"vec", 2}}));
}

TEST_CASE("a finished session resumed with nothing new to measure keeps its winner as its finalists were timed, and "
          "one more result times them again",
          "[session]") {
  const auto& family = templates::find_family("adamw_single");
  const Problem problem{"f32", {{"tensors", 2}, {"numel", 1000}}};
  TuneOptions o;
  o.run.time = true;
  o.budget = "6";
  const std::string plain_log = (test::scratch_dir("session-resume-finished") / "log.jsonl").string();
  const std::string flaky_log = (test::scratch_dir("session-resume-finished-flaky") / "log.jsonl").string();
  o.log_path = plain_log;
  const auto by_threads = [](const Config& c) { return 1.0 + std::abs(c.at("threads") - 128) / 256.0; };
  ScriptedRunner first;
  first.noisy = true;
  first.time_of = by_threads;
  const auto s1 = tune(family, problem, first, o);
  REQUIRE(s1.best);
  REQUIRE(s1.finalists.size() >= 2);
  CHECK_FALSE(s1.finalists_from_log);
  // A resumed session whose finalists are the same: one of them failed when timed again, which it keeps.
  ScriptedRunner flaky;
  flaky.noisy = true;
  flaky.time_of = by_threads;
  flaky.flaky = {s1.finalists.back().config};
  o.log_path = flaky_log;
  const auto f1 = tune(family, problem, flaky, o);
  REQUIRE(f1.disqualified.size() == 1);

  o.resume = true;
  for (const auto* earlier : {&s1, &f1}) {
    const std::string path = earlier == &s1 ? plain_log : flaky_log;
    auto resumed_options = o;
    resumed_options.log_path = path;
    const std::string logged = read_file(path);
    ScriptedRunner again;  // measures otherwise: a run of it would show
    again.time_of = [](const Config& c) { return 5.0 - c.at("threads") / 1024.0; };
    const auto s = tune(family, problem, again, resumed_options);
    CHECK(again.calls == 0);
    CHECK(s.finalists_from_log);
    REQUIRE(s.best);
    CHECK(s.best->config == earlier->best->config);
    CHECK(s.best->result.timing->median_ms == earlier->best->result.timing->median_ms);
    REQUIRE(s.finalists.size() == earlier->finalists.size());
    for (std::size_t i = 0; i < s.finalists.size(); ++i) {
      CHECK(s.finalists[i].config == earlier->finalists[i].config);
      CHECK(s.finalists[i].result.timing->samples_ms == earlier->finalists[i].result.timing->samples_ms);
      CHECK(s.finalists[i].resumed);
    }
    REQUIRE(s.disqualified.size() == earlier->disqualified.size());
    if (!s.disqualified.empty()) {
      CHECK(s.disqualified[0].config == earlier->disqualified[0].config);
      CHECK(s.disqualified[0].result.failure == "launch: CUDA_ERROR_LAUNCH_TIMEOUT");
    }
    CHECK(read_file(path) == logged);  // nothing appended: the log's winner stands
  }
  // Stopped at once (a signal): the logged timing costs no run, so the log's winner stands as it was judged.
  {
    auto stopped = o;
    stopped.log_path = plain_log;
    stopped.should_stop = [] { return true; };
    const std::string logged = read_file(plain_log);
    ScriptedRunner idle;
    const auto s = tune(family, problem, idle, stopped);
    CHECK(idle.calls == 0);
    CHECK(s.finalists_from_log);
    REQUIRE(s.best);
    CHECK(s.best->config == s1.best->config);
    CHECK(s.best->result.timing->median_ms == s1.best->result.timing->median_ms);
    CHECK(read_file(plain_log) == logged);
  }
  // Finalists that tie: the default won them; resumed with a cache whose config is another of them, the tie goes
  // to it, from the same logged samples, and the log names it.
  const std::string tie_log = (test::scratch_dir("session-resume-finished-tie") / "log.jsonl").string();
  auto tie = o;
  tie.resume = false;
  tie.log_path = tie_log;
  ScriptedRunner level;
  level.noisy = true;
  level.time_of = [](const Config&) { return 1.0; };
  const auto t1 = tune(family, problem, level, tie);
  REQUIRE(t1.finalists.size() >= 2);
  CHECK(t1.best->config == family.default_config(problem));
  tie.resume = true;
  tie.incumbent = t1.finalists[0].config != t1.best->config ? t1.finalists[0].config : t1.finalists[1].config;
  ScriptedRunner unused;
  const auto t2 = tune(family, problem, unused, tie);
  CHECK(unused.calls == 0);
  CHECK(t2.finalists_from_log);
  CHECK(t2.best->config == *tie.incumbent);
  CHECK(Config::from_json(read_session_log(tie_log).winner.at("config")) == *tie.incumbent);

  // One finalist (nothing timed again): resumed with nothing new, the log's winner stands, not written twice.
  const std::string single_log = (test::scratch_dir("session-resume-finished-single") / "log.jsonl").string();
  auto single = o;
  single.resume = false;
  single.finalists = 1;
  single.log_path = single_log;
  ScriptedRunner once;
  once.time_of = by_threads;
  const auto f = tune(family, problem, once, single);
  REQUIRE(f.best);
  const std::string single_logged = read_file(single_log);
  single.resume = true;
  ScriptedRunner none;
  CHECK(tune(family, problem, none, single).best->config == f.best->config);
  CHECK(none.calls == 0);
  CHECK(read_file(single_log) == single_logged);

  // One more evaluation: a new result, so the finalists are timed again (by the runner that measures otherwise).
  o.log_path = plain_log;
  o.budget = "7";
  ScriptedRunner more;
  more.time_of = [](const Config& c) { return 5.0 - c.at("threads") / 1024.0; };
  const auto s2 = tune(family, problem, more, o);
  CHECK(more.calls > 1);
  CHECK_FALSE(s2.finalists_from_log);
  for (const auto& r : s2.finalists) CHECK_FALSE(r.resumed);
  const auto read = read_session_log(o.log_path);
  CHECK(Config::from_json(read.winner.at("config")) == s2.best->config);
}

TEST_CASE("the cache's config for the problem is measured in the session, so only a faster one replaces it",
          "[session]") {
  const auto& family = templates::find_family("adamw_single");
  const Problem problem{"f32", {{"tensors", 2}, {"numel", 1000}}};
  const Config cached({{"threads", 128}, {"vec", 2}});
  const auto fastest_at_128 = [&](const Config& c) { return c == cached ? 0.5 : 1.0; };
  TuneOptions o;
  o.run.time = true;
  o.budget = "1";  // the default alone, within the budget
  ScriptedRunner without;
  without.time_of = fastest_at_128;
  CHECK(tune(family, problem, without, o).best->config == family.default_config(problem));
  o.incumbent = cached;
  ScriptedRunner with;
  with.time_of = fastest_at_128;
  const auto s = tune(family, problem, with, o);
  CHECK(with.seen.count(cached));
  CHECK(s.best->config == cached);
  // Measured slower than what the session found, it is replaced.
  ScriptedRunner slower;
  slower.time_of = [&](const Config& c) { return c == cached ? 2.0 : 1.0; };
  o.budget = "";
  CHECK(tune(family, problem, slower, o).best->config != cached);
}

TEST_CASE("the cache's config competes only where the session measured it (a stop before it, or another shard, "
          "leaves it to the merge rule), and measured past the budget it is counted",
          "[session]") {
  const auto& family = templates::find_family("adamw_single");
  const Problem problem{"f32", {{"tensors", 2}, {"numel", 1000}}};
  const Config cached({{"threads", 128}, {"vec", 2}});
  TuneOptions o;
  o.run.time = true;
  o.incumbent = cached;
  SECTION("measured past the budget: in the count and the records") {
    o.budget = "1";  // the default alone, within the budget
    ScriptedRunner runner;
    const auto s = tune(family, problem, runner, o);
    CHECK(runner.seen.count(cached));
    CHECK(s.incumbent_competed);
    CHECK(s.evaluations == 2);
    CHECK(std::any_of(s.records.begin(), s.records.end(), [&](const auto& r) { return r.config == cached; }));
  }
  SECTION("a stop before it") {
    ScriptedRunner runner;
    o.should_stop = [&runner] { return runner.calls > 0; };  // after the default
    const auto s = tune(family, problem, runner, o);
    CHECK_FALSE(runner.seen.count(cached));
    CHECK_FALSE(s.incumbent_competed);
  }
  SECTION("in another shard, or in this one") {
    o.shard_count = 2;
    const std::uint64_t its_shard = *family.space().index_of(cached) % 2;
    o.shard_index = 1 - its_shard;
    ScriptedRunner other;
    CHECK_FALSE(tune(family, problem, other, o).incumbent_competed);
    CHECK_FALSE(other.seen.count(cached));
    o.shard_index = its_shard;
    ScriptedRunner own;
    CHECK(tune(family, problem, own, o).incumbent_competed);
    CHECK(own.seen.count(cached));
  }
  SECTION("no longer valid here: nothing to keep") {
    o.incumbent = Config({{"threads", 96}, {"vec", 2}});  // not a point of the space
    o.should_stop = [] { return true; };
    ScriptedRunner runner;
    CHECK(tune(family, problem, runner, o).incumbent_competed);
  }
}

TEST_CASE("the incumbent is the entry of the session's own key, not another driver's or source's, which competes "
          "only where none is, without its count",
          "[session]") {
  const auto& family = templates::find_family("adamw_single");
  const Problem problem{"f32", {{"tensors", 2}, {"numel", 1000}}};
  const ScriptedRunner runner;
  const cache::Key key = cache_key(family, problem, runner.device());
  const auto entry = [&](const cache::Key& k, const Config& c, std::int64_t evaluations, const std::string& date) {
    cache::Entry e;
    e.key = k;
    e.config = c.to_json();
    e.time_ms = e.p20_ms = e.p80_ms = 1.0;
    e.repetitions = 10;
    e.evaluations = evaluations;
    e.date = date;
    return e;
  };
  cache::Key other_driver = key;
  other_driver.driver_version = "99999";
  const Config own({{"threads", 128}, {"vec", 2}}), theirs({{"threads", 512}, {"vec", 1}});
  // The other driver's entry comes last and is newer: the session's own key's is taken all the same.
  const std::vector<cache::Entry> both = {entry(key, own, 50, "2026-01-01T00:00:00Z"),
                                          entry(other_driver, theirs, 999, "2027-01-01T00:00:00Z")};
  TuneOptions o;
  REQUIRE(take_incumbent(o, both, family, problem, runner.device()));
  CHECK(*o.incumbent == own);
  CHECK(o.incumbent_evaluations == 50);
  TuneOptions alone;
  REQUIRE(take_incumbent(alone, {both[1]}, family, problem, runner.device()));
  CHECK(*alone.incumbent == theirs);
  CHECK(alone.incumbent_evaluations == 0);
  cache::Key other_problem = key;
  other_problem.problem_key += "x";
  TuneOptions none;
  CHECK_FALSE(take_incumbent(none, {entry(other_problem, own, 5, "2026-01-01T00:00:00Z")}, family, problem,
                             runner.device()));
}

TEST_CASE("the finalists are timed again in two passes, the second in the reverse order, so a drift falls "
          "alike on all",
          "[session]") {
  const auto& family = templates::find_family("adamw_single");
  const Problem problem{"f32", {{"tensors", 2}, {"numel", 1000}}};
  const Config def = family.default_config(problem);
  ScriptedRunner runner;
  runner.noisy = true;
  TuneOptions o;
  o.run.time = true;
  o.budget = "12";
  o.finalists = 3;
  o.log_path = (test::scratch_dir("session-two-passes") / "log.jsonl").string();
  // Every config equally fast, the GPU slowing by 1 % with each run (a clock or temperature drift): in one pass
  // the last timed read slowest.
  runner.time_of = [&runner](const Config&) { return 1.0 + 0.01 * runner.calls; };
  const auto s = tune(family, problem, runner, o);
  REQUIRE(s.finalists.size() >= 3);
  const std::size_t searched = runner.order.size() - 2 * s.finalists.size();
  std::vector<Config> first(runner.order.begin() + static_cast<std::ptrdiff_t>(searched),
                            runner.order.begin() + static_cast<std::ptrdiff_t>(searched + s.finalists.size()));
  std::vector<Config> second(runner.order.begin() + static_cast<std::ptrdiff_t>(searched + s.finalists.size()),
                             runner.order.end());
  std::reverse(second.begin(), second.end());
  CHECK(first == second);
  CHECK(std::find(first.begin(), first.end(), def) != first.end());
  // Each finalist's two passes together: every one reads the same median, and the drift favours none.
  for (const auto& r : s.finalists) {
    CHECK(r.result.timing->median_ms == Approx(s.finalists.front().result.timing->median_ms).epsilon(0.002));
    CHECK(r.result.timing->repetitions == 20);
    CHECK_THAT(r.result.timing->method, Catch::StartsWith("timed again beside the other finalists in two passes"));
  }
}

TEST_CASE("the finalists are judged on their side-by-side times and a tie keeps the cache's config", "[session]") {
  const auto& family = templates::find_family("adamw_single");
  const Problem problem{"f32", {{"tensors", 2}, {"numel", 1000}}};
  const Config def = family.default_config(problem);
  const Config cached({{"threads", 128}, {"vec", 2}});
  const Config quick({{"threads", 512}, {"vec", 1}});
  TuneOptions o;
  o.run.time = true;
  o.log_path = (test::scratch_dir("session-finalists") / "log.jsonl").string();
  // Each config's first measurement is the search's; the later ones are side by side.
  const auto scripted = [](std::function<double(const Config&, bool again)> time) {
    auto runner = std::make_unique<ScriptedRunner>();
    runner->time_of = [time, calls = std::make_shared<std::map<Config, int>>()](const Config& c) {
      return time(c, ++(*calls)[c] > 1);
    };
    return runner;
  };
  SECTION("the default, measured cold first of all, is slower in the search than side by side") {
    auto runner = scripted([&](const Config& c, bool again) {
      return c == def ? (again ? 1.0 : 4.0) : c == quick ? 0.5 : 2.0;
    });
    const auto s = tune(family, problem, *runner, o);
    REQUIRE(s.best);
    CHECK(s.best->config == quick);
    CHECK(s.kept_note.empty());
    CHECK(s.speedup_over_default() == Approx(2.0));  // not the search's 8
    CHECK(std::any_of(s.finalists.begin(), s.finalists.end(), [&](const Record& r) { return r.config == def; }));
    const auto read = read_session_log(o.log_path);
    CHECK(read.winner.at("finalists").size() == s.finalists.size());
  }
  SECTION("a config fast once in the search but not side by side does not win") {
    auto runner = scripted([&](const Config& c, bool again) {
      return c == def ? 1.0 : c == quick ? (again ? 1.0 : 0.5) : 2.0;
    });
    const auto s = tune(family, problem, *runner, o);
    REQUIRE(s.best);
    CHECK(s.best->config == def);
    // Said, with both times, so a table of the search's times does not read as a contradiction.
    CHECK_THAT(s.kept_note, Catch::StartsWith(quick.str() + ", the fastest in the search, timed again beside the "
                                                            "finalists at 1.0000 ms") &&
                                Catch::Contains("is not measurably faster than the default " + def.str()) &&
                                Catch::Contains("(the intervals of their medians the winner rule compares, "
                                                "1.0000-1.0000 ms over "));
  }
  SECTION("a config fast in the search and slower side by side is said to be slower, not tied") {
    auto runner = scripted([&](const Config& c, bool again) {
      return c == def ? 1.0 : c == quick ? (again ? 1.5 : 0.5) : 2.0;
    });
    const auto s = tune(family, problem, *runner, o);
    REQUIRE(s.best);
    CHECK(s.best->config == def);
    CHECK_THAT(s.kept_note, Catch::StartsWith(quick.str() + ", the fastest in the search at 0.5000 ms, timed again "
                                                            "beside the finalists at 1.5000 ms") &&
                                Catch::EndsWith("is slower than the default " + def.str() +
                                                " (1.0000 ms, p20-p80 0.9900-1.0100), which wins"));
  }
  SECTION("the cache's config, as fast as the default side by side, stays") {
    o.incumbent = cached;
    o.budget = "2";
    auto runner = scripted([&](const Config& c, bool again) {
      return c == cached ? (again ? 1.0 : 0.5) : c == def ? 0.999 : 2.0;
    });
    runner->noisy = true;
    o.incumbent_evaluations = 87;  // what its entry says found it
    const auto s = tune(family, problem, *runner, o);
    REQUIRE(s.best);
    CHECK(s.best->config == cached);
    // The entry that keeps it says the search that found it, not this short one.
    CHECK(s.evaluations == 2);
    CHECK(cache_entry(family, problem, runner->device(), s).evaluations == 87);
  }
}

TEST_CASE("where the winner sums by atomics, the session keeps the fastest config measured that does not, timed "
          "beside the finalists, and its cache entry holds it",
          "[session][deterministic]") {
  const auto& family = templates::find_family("embedding_bwd");
  const Problem problem{"f32", {{"rows", 256}, {"dim", 64}, {"vocab", 1000}}};
  TuneOptions o;
  o.run.time = true;
  o.budget = "40";
  o.log_path = (test::scratch_dir("session-deterministic") / "log.jsonl").string();
  ScriptedRunner runner;
  const auto base = [](const Config& c) {
    return std::abs(c.at("threads") - 128) / 256.0 + (4 - c.at("vec")) * 0.1 + c.at("deterministic") * 0.01;
  };
  SECTION("atomics fastest") {
    runner.time_of = [&](const Config& c) { return (family.deterministic(c) ? 2.0 : 1.0) + base(c); };
    const auto s = tune(family, problem, runner, o);
    REQUIRE(s.best);
    CHECK_FALSE(family.deterministic(s.best->config));
    REQUIRE(s.best_deterministic);
    CHECK(family.deterministic(s.best_deterministic->config));
    double fastest = std::numeric_limits<double>::infinity();  // of the measured configs that sum in order
    for (const Config& c : runner.seen)
      if (family.deterministic(c) && family.is_valid(c, problem, runner.device()))
        fastest = std::min(fastest, runner.time_of(c));
    // The default, a finalist, sums in a fixed order too, and is slower than the one kept.
    const Config def = family.default_config(problem);
    REQUIRE(family.deterministic(def));
    CHECK(fastest < runner.time_of(def));
    CHECK(s.best_deterministic->result.timing->median_ms == fastest);
    CHECK(std::any_of(s.finalists.begin(), s.finalists.end(),
                      [&](const Record& r) { return r.config == s.best_deterministic->config; }));
    const cache::Entry e = cache_entry(family, problem, runner.device(), s);
    REQUIRE(e.deterministic);
    CHECK(e.deterministic->config == s.best_deterministic->config.to_json());
    CHECK(e.deterministic->time_ms == fastest);
    CHECK(read_session_log(o.log_path).winner.at("deterministic").at("config") == e.deterministic->config);
    // A deterministic run with this entry takes that config, not the one nearest the winner.
    const cache::TunedCache tuned({e});
    const auto chosen = choose_config(family, problem, runner.device(), &tuned, nullptr, true);
    CHECK(chosen.config == s.best_deterministic->config);
    CHECK(chosen.deterministic_measured);
    CHECK_THAT(chosen.source, Catch::Contains("; deterministic: the fastest such config its tuning measured ("));
  }
  SECTION("the winner sums in a fixed order: nothing beside it") {
    runner.time_of = [&](const Config& c) { return (family.deterministic(c) ? 1.0 : 2.0) + base(c); };
    const auto s = tune(family, problem, runner, o);
    REQUIRE(s.best);
    CHECK(family.deterministic(s.best->config));
    CHECK_FALSE(s.best_deterministic);
    CHECK_FALSE(cache_entry(family, problem, runner.device(), s).deterministic);
    CHECK_FALSE(read_session_log(o.log_path).winner.contains("deterministic"));
  }
}

TEST_CASE("a deterministic session measures only configs that sum in a fixed order, from the one nearest the "
          "default, and a resumed log's others stay out of it",
          "[session][deterministic]") {
  const auto& family = templates::find_family("embedding_bwd");
  const Problem problem{"f32", {{"rows", 256}, {"dim", 64}, {"vocab", 1000}}};
  TuneOptions o;
  o.run.time = true;
  o.budget = "30";
  o.log_path = (test::scratch_dir("session-deterministic-search") / "log.jsonl").string();
  const auto time_of = [&](const Config& c) {
    return (family.deterministic(c) ? 2.0 : 1.0) + std::abs(c.at("threads") - 128) / 256.0 +
           (4 - c.at("vec")) * 0.1;
  };
  ScriptedRunner plain;
  plain.time_of = time_of;
  REQUIRE_FALSE(family.deterministic(tune(family, problem, plain, o).best->config));  // atomics win
  o.deterministic = true;
  o.resume = true;
  o.budget = "60";
  ScriptedRunner runner;
  runner.time_of = time_of;
  const auto s = tune(family, problem, runner, o);
  REQUIRE(s.best);
  CHECK(family.deterministic(s.best->config));
  CHECK_FALSE(s.best_deterministic);
  // The logged results that sum in a fixed order are taken, the others are not measured again nor compete.
  std::size_t logged_fixed = 0;
  for (const Config& c : plain.seen) logged_fixed += family.deterministic(c) ? 1 : 0;
  CHECK(s.resumed == logged_fixed);
  CHECK_FALSE(runner.seen.empty());
  for (const Config& c : runner.seen) CHECK(family.deterministic(c));
  double fastest = std::numeric_limits<double>::infinity();
  for (const auto* seen : {&plain.seen, &runner.seen})
    for (const Config& c : *seen)
      if (family.deterministic(c)) fastest = std::min(fastest, time_of(c));
  CHECK(s.best->result.timing->median_ms == fastest);
  CHECK(session_default(family, problem, runner.device(), true) ==
        choose_config(family, problem, runner.device(), nullptr, nullptr, true).config);
  // A family none of whose configs sums in a fixed order cannot be tuned so.
  const auto& index_add = templates::find_family("prim_index_add");
  CHECK_THROWS_WITH(session_default(index_add, index_add.problem_classes().front(), runner.device(), true),
                    Catch::Contains("the run cannot be deterministic"));
}

TEST_CASE("a budget beyond the space ends with every valid config measured and says the space is exhausted",
          "[session]") {
  const auto& family = templates::find_family("rmsnorm_fwd");
  const Problem problem{"bf16", {{"rows", 37}, {"dim", 96}}};
  TuneOptions o;
  o.run.time = true;
  for (const char* strategy : {"genetic", "exhaustive"}) {
    INFO(strategy);
    o.strategy = strategy;  // the genetic algorithm once stopped when a random draw repeated what it had measured
    ScriptedRunner runner;
    const auto s = tune(family, problem, runner, o);
    CHECK(s.valid_points == 69);
    CHECK(s.evaluations == 69);
    CHECK(s.stopped_by == "space exhausted (all 69 valid configs measured)");
  }
}

TEST_CASE("a log from another family or problem is refused on resume", "[session]") {
  const auto& family = templates::find_family("adamw_single");
  TuneOptions o;
  o.run.time = true;
  o.log_path = (test::scratch_dir("session") / "log.jsonl").string();
  ScriptedRunner runner;
  o.budget = "2";
  tune(family, Problem{"f32", {{"tensors", 2}, {"numel", 1000}}}, runner, o);
  o.resume = true;
  CHECK_THROWS_WITH(tune(family, Problem{"f32", {{"tensors", 3}, {"numel", 1000}}}, runner, o),
                    Catch::Contains("is for adamw_single on f32;numel=1000;tensors=2"));
}

TEST_CASE("resuming a log that is not there starts it with its header and a file that is no log is refused",
          "[session]") {
  const auto& family = templates::find_family("adamw_single");
  const Problem problem{"f32", {{"tensors", 2}, {"numel", 1000}}};
  TuneOptions o;
  o.run.time = true;
  o.resume = true;
  o.budget = "2";
  o.log_path = (test::scratch_dir("session-resume") / "new.jsonl").string();
  ScriptedRunner runner;
  tune(family, problem, runner, o);
  std::ifstream in(o.log_path);
  std::string first;
  std::getline(in, first);
  CHECK(nlohmann::json::parse(first).at("session").at("family") == "adamw_single");
  // Resumed again, the log reads back: both evaluations from it, no second header.
  ScriptedRunner again;
  CHECK(tune(family, problem, again, o).resumed == 2);
  std::ifstream lines(o.log_path);
  int headers = 0;
  for (std::string line; std::getline(lines, line);) headers += nlohmann::json::parse(line).contains("session");
  CHECK(headers == 1);
  // Notes (or any file not a session log) are neither read as one nor appended to.
  o.log_path = (test::scratch_dir("session-resume") / "notes.txt").string();
  std::ofstream(o.log_path) << "notes\n{\"config\": {}}\n";
  CHECK_THROWS_WITH(tune(family, problem, runner, o), Catch::Contains("is not a ktune session log"));
  CHECK(fs::file_size(o.log_path) == 21);
}

TEST_CASE("a new session keeps the default log it replaces or refuses the user's own and one with no valid config "
          "touches neither",
          "[session]") {
  const auto& family = templates::find_family("adamw_single");
  const Problem problem{"f32", {{"tensors", 2}, {"numel", 1000}}};
  const auto dir = test::scratch_dir("session-previous");
  TuneOptions o;
  o.run.time = true;
  o.finalists = 1;
  o.budget = "3";
  o.default_log = true;
  o.log_path = (dir / "adamw_single.f32.log").string();
  ScriptedRunner first;
  CHECK(tune(family, problem, first, o).previous_log.empty());  // nothing to keep
  const std::string first_log = read_file(o.log_path);
  o.budget = "2";
  ScriptedRunner second;
  CHECK(tune(family, problem, second, o).previous_log == (dir / "adamw_single.f32.previous.log").string());
  CHECK(read_file(dir / "adamw_single.f32.previous.log") == first_log);
  const std::string second_log = read_file(o.log_path);
  CHECK(std::count(second_log.begin(), second_log.end(), '\n') == 4);  // its header, two results and the winner
  // A space with no valid config on the device is refused before the log is touched.
  ScriptedRunner none;
  none.device_.max_threads_per_block = 16;
  CHECK_THROWS_WITH(tune(family, problem, none, o), Catch::Contains("no config of the space is valid"));
  CHECK(read_file(o.log_path) == second_log);
  CHECK(read_file(dir / "adamw_single.f32.previous.log") == first_log);
  // So is a session that ends before its first result (a reference that fails): the log is written from it on.
  ScriptedRunner refusing;
  refusing.refused = "the reference failed";
  CHECK_THROWS_WITH(tune(family, problem, refusing, o), "the reference failed");
  CHECK(refusing.calls == 1);
  CHECK(read_file(o.log_path) == second_log);
  CHECK(read_file(dir / "adamw_single.f32.previous.log") == first_log);
  CHECK_THROWS_WITH(tune(family, problem, refusing, [&] {
                      auto fresh = o;
                      fresh.log_path = (dir / "fresh" / "x.log").string();
                      return fresh;
                    }()),
                    "the reference failed");
  CHECK_FALSE(fs::exists(dir / "fresh"));
  // And one stopped before its first result (a signal at once).
  ScriptedRunner stopped;
  auto stopping = o;
  stopping.should_stop = [] { return true; };
  CHECK_FALSE(tune(family, problem, stopped, stopping).best.has_value());
  CHECK(stopped.calls == 0);
  CHECK(read_file(o.log_path) == second_log);
  CHECK(read_file(dir / "adamw_single.f32.previous.log") == first_log);
  // The user's own --log that holds results is refused without --resume, as a checkpoint is.
  o.default_log = false;
  ScriptedRunner third;
  CHECK_THROWS_WITH(tune(family, problem, third, o),
                    "--log " + o.log_path + " holds the results of a session of adamw_single on " + problem.key() +
                        ": give --resume to go on from it, or remove it (or give another --log) to start anew");
  CHECK(third.calls == 0);
  CHECK(read_file(o.log_path) == second_log);
  // Another problem's: --resume would be refused too, so the message does not offer it.
  const Problem other{"f32", {{"tensors", 2}, {"numel", 2000}}};
  CHECK_THROWS_WITH(tune(family, other, third, o),
                    "session log " + o.log_path + " is for adamw_single on " + problem.key() +
                        ", not adamw_single on " + other.key() + "; give another --log (or remove it) to start anew");
  // And so is the one of another device (or backend, or kernel source): --resume would not take it over either.
  ScriptedRunner elsewhere;
  elsewhere.device_ = DeviceLimits::for_arch("sm_80");
  CHECK_THROWS_WITH(tune(family, problem, elsewhere, o),
                    Catch::StartsWith("session log " + o.log_path + " holds results of arch \"sm_90\", this "
                                      "session's arch is \"sm_80\": they are not its results; give another --log"));
  o.resume = true;
  CHECK_THROWS_WITH(tune(family, problem, elsewhere, o), Catch::EndsWith("; give another --log (or remove it) to start "
                                                                         "anew"));
  o.resume = false;
  CHECK(read_file(o.log_path) == second_log);
}

TEST_CASE("new sessions keep every earlier default log, say where an unfinished one went, and a resumed log's torn "
          "last line is cut",
          "[session]") {
  const auto& family = templates::find_family("adamw_single");
  const Problem problem{"f32", {{"tensors", 2}, {"numel", 1000}}};
  const auto dir = test::scratch_dir("session-generations");
  std::vector<std::string> notes;
  TuneOptions o;
  o.run.time = true;
  o.finalists = 1;
  o.budget = "3";
  o.default_log = true;
  o.log_path = (dir / "adamw_single.f32.log").string();
  o.on_note = [&](const std::string& note) { notes.push_back(note); };
  std::vector<std::string> logs;  // each session's log, oldest first
  for (int i = 0; i < 3; ++i) {
    ScriptedRunner runner;
    tune(family, problem, runner, o);
    logs.push_back(read_file(o.log_path));
  }
  CHECK(notes.empty());  // the logs replaced were of finished sessions
  CHECK(read_file(dir / "adamw_single.f32.previous.log") == logs[1]);
  CHECK(read_file(dir / "adamw_single.f32.previous.2.log") == logs[0]);
  // A session killed before its winner (its log ends at its last result, half written): a new one says where
  // that log went, and every earlier one moves a generation down.
  std::string killed = logs[2].substr(0, logs[2].rfind("{\"winner\""));
  std::ofstream(o.log_path, std::ios::trunc) << killed << "{\"config\": {\"thr";
  ScriptedRunner fresh;
  tune(family, problem, fresh, o);
  REQUIRE(notes.size() == 1);
  const std::string kept = (dir / "adamw_single.f32.previous.log").string();
  CHECK(notes[0] == o.log_path + " holds 3 results of a session of this kernel that ended before its winner; this "
                                 "one starts anew and keeps that log as " + kept +
                        " (the same command with --resume goes on from its results instead)");
  CHECK(read_file(kept) == killed + "{\"config\": {\"thr");
  CHECK(read_file(dir / "adamw_single.f32.previous.2.log") == logs[1]);
  CHECK(read_file(dir / "adamw_single.f32.previous.3.log") == logs[0]);
  // Resumed, the torn line is cut before the session appends: every line of the log reads back.
  std::ofstream(o.log_path, std::ios::trunc) << killed << "{\"config\": {\"thr";
  o.resume = true;
  o.budget = "5";
  ScriptedRunner resumed;
  CHECK(tune(family, problem, resumed, o).resumed == 3);
  std::ifstream lines(o.log_path);
  int read = 0;
  for (std::string line; std::getline(lines, line); ++read)
    CHECK(nlohmann::json::parse(line, nullptr, false).is_object());
  CHECK(read >= 6);  // the header, five results (and the winner)
  CHECK(read_file(o.log_path).substr(0, killed.size()) == killed);
  // A last line that reads whole but has no newline (a file edited, a kill before the newline) is kept, ended.
  std::ofstream(o.log_path, std::ios::trunc) << killed.substr(0, killed.size() - 1);
  ScriptedRunner unended;
  CHECK(tune(family, problem, unended, o).resumed == 3);
  CHECK(read_file(o.log_path).substr(0, killed.size()) == killed);
  // So is a header alone: the log stays a session log.
  std::ofstream(o.log_path, std::ios::trunc) << killed.substr(0, killed.find('\n'));
  ScriptedRunner header_only;
  tune(family, problem, header_only, o);
  CHECK(read_session_log(o.log_path).records.size() == 5);
  // A finished session's log that a resumed session, killed, added results to: the note names it too.
  o.resume = false;
  o.budget = "3";
  notes.clear();
  const std::string result_line = killed.substr(killed.find('\n') + 1, killed.find('\n', killed.find('\n') + 1) -
                                                                        killed.find('\n'));
  std::ofstream(o.log_path, std::ios::trunc) << logs[0] << result_line << result_line;
  ScriptedRunner after;
  tune(family, problem, after, o);
  REQUIRE(notes.size() == 1);
  CHECK_THAT(notes[0], Catch::StartsWith(o.log_path + " holds 5 results of a session of this kernel that ended "
                                                      "before its winner"));
}

TEST_CASE("a plateau budget of a resumed session counts the log's results after its best", "[session]") {
  const auto& family = templates::find_family("swiglu_fwd");
  const Problem problem{"f32", {{"n", 1024}}};
  TuneOptions o;
  o.run.time = true;
  o.finalists = 1;
  o.strategy = "annealing";
  o.seed = 3;
  o.log_path = (test::scratch_dir("session-resume-plateau") / "log.jsonl").string();
  o.budget = "plateau:5";  // ends 5 results after its best
  ScriptedRunner first;
  tune(family, problem, first, o);
  // Another search on the same log and budget: the plateau was reached there, so it measures nothing new.
  o.resume = true;
  o.strategy = "random";
  o.seed = 11;
  ScriptedRunner resumed;
  const TuneSummary s = tune(family, problem, resumed, o);
  std::size_t fresh = 0;
  for (const Config& c : resumed.seen) fresh += first.seen.count(c) == 0;
  CHECK(fresh == 0);
  CHECK(s.evaluations == first.seen.size());
}

TEST_CASE("a session resumed with another strategy counts every logged result against its budget", "[session]") {
  const auto& family = templates::find_family("adamw_single");
  const Problem problem{"f32", {{"tensors", 2}, {"numel", 1000}}};
  REQUIRE(family.space().size() > 10);
  TuneOptions o;
  o.run.time = true;
  o.finalists = 1;  // no finalist timed again: every run of the runner is an evaluation
  o.budget = "8";
  o.strategy = "exhaustive";
  o.log_path = (test::scratch_dir("session-resume-budget") / "log.jsonl").string();
  ScriptedRunner first;
  REQUIRE(tune(family, problem, first, o).evaluations == 8);
  // The same budget under another strategy and seed: the log has spent it, nothing more runs.
  o.resume = true;
  o.strategy = "random";
  o.seed = 5;
  ScriptedRunner again;
  const auto s = tune(family, problem, again, o);
  CHECK(again.calls == 0);
  CHECK(s.evaluations == 8);
  CHECK(s.resumed == 8);
  CHECK(s.records.size() == 8);
  CHECK(read_session_log(o.log_path).records.size() == 8);
  // Two more evaluations: two new results, whatever the strategy proposes again from the log.
  o.budget = "10";
  ScriptedRunner more;
  // Its progress counts the log's results, and its ETA their cost: the cost still to spend is the share of the
  // budget left times the cost per evaluation so far.
  std::vector<std::uint64_t> counted;
  const auto t = tune(family, problem, more, o, [&](const Record&, const search::Progress& p) {
    counted.push_back(p.state->evaluations);
    const double spent = static_cast<double>(p.state->evaluations) / 10;
    if (spent < 1) CHECK(p.eta_s == Approx(p.state->cost_s * (1 - spent) / spent));
  });
  CHECK(counted.back() == 10);
  CHECK(std::all_of(counted.begin(), counted.end(), [](auto n) { return n >= 8; }));
  CHECK(more.calls == 2);
  CHECK(t.evaluations == 10);
  CHECK(read_session_log(o.log_path).records.size() == 10);
  // Under a budget whose share says little (a plateau, an hour), the share of the space evaluated, the log's
  // results included, is what the ETA goes by.
  o.budget = "plateau:200+1h";
  o.strategy = "annealing";
  ScriptedRunner on;
  std::size_t reports = 0;
  tune(family, problem, on, o, [&](const Record&, const search::Progress& p) {
    REQUIRE(p.valid_points > 0);
    const double covered = std::min(1.0, static_cast<double>(p.state->evaluations) / p.valid_points);
    const double spent = std::max(p.state->cost_s / 3600, covered);
    if (spent < 1) CHECK(p.eta_s == Approx(p.state->cost_s * (1 - spent) / spent));
    ++reports;
  });
  CHECK(reports > 0);
  CHECK(on.calls > 0);
}

TEST_CASE("unreadable lines amid a session log are counted and said, a cut last line apart", "[session]") {
  const auto& family = templates::find_family("adamw_single");
  const Problem problem{"f32", {{"tensors", 2}, {"numel", 1000}}};
  TuneOptions o;
  o.run.time = true;
  o.finalists = 1;
  o.budget = "6";
  o.log_path = (test::scratch_dir("session-unreadable") / "log.jsonl").string();
  ScriptedRunner first;
  tune(family, problem, first, o);
  std::vector<std::string> lines;
  {
    std::ifstream in(o.log_path);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
  }
  REQUIRE(lines.size() == 8);  // the header, six evaluations, the winner
  lines[2] = "xx not json";    // the second evaluation
  {
    std::ofstream out(o.log_path, std::ios::trunc);
    for (const auto& l : lines) out << l << "\n";
    out << "{\"config\":{\"thr";  // and a last line cut short
  }
  const auto log = read_session_log(o.log_path);
  CHECK(log.records.size() == 5);
  CHECK(log.unreadable.count == 1);
  CHECK(log.unreadable.first == 3);
  CHECK(log.unreadable.last_cut);
  CHECK(unreadable_note(o.log_path, log.unreadable, "not shown") ==
        "session log " + o.log_path + ": skipped 1 unreadable line (the first at line 3), and its last line, cut "
        "short; not shown");
  CHECK(unreadable_note(o.log_path, {0, 0, true}, "not shown").empty());  // a kill's cut last line alone: expected
  // Resumed, the session says so before it runs that evaluation again.
  o.resume = true;
  std::vector<std::string> notes;
  o.on_note = [&](const std::string& note) { notes.push_back(note); };
  ScriptedRunner again;
  CHECK(tune(family, problem, again, o).resumed == 5);
  CHECK(again.calls == 1);
  REQUIRE(notes.size() == 1);
  CHECK_THAT(notes[0], Catch::Contains("skipped 1 unreadable line (the first at line 3)") &&
                           Catch::EndsWith("their evaluations run again"));
  CHECK_THROWS_WITH(read_session_log(test::scratch_dir("session-unreadable").string()),
                    Catch::Contains("is a directory"));
}

TEST_CASE("a session resumed with another strategy or seed logs its own header after the results it takes over",
          "[session]") {
  const auto& family = templates::find_family("adamw_single");
  const Problem problem{"f32", {{"tensors", 2}, {"numel", 1000}}};
  TuneOptions o;
  o.run.time = true;
  o.budget = "3";
  o.strategy = "random";
  o.log_path = (test::scratch_dir("session-restrategy") / "log.jsonl").string();
  ScriptedRunner runner;
  tune(family, problem, runner, o);
  o.resume = true;
  o.budget = "5";
  o.strategy = "genetic";
  o.seed = 7;
  ScriptedRunner again;
  CHECK(tune(family, problem, again, o).resumed == 3);
  const auto log = read_session_log(o.log_path);
  REQUIRE(log.sessions.size() == 2);
  CHECK(log.sessions[0].at("strategy") == "random");
  CHECK(log.sessions[0].at("seed") == 1);
  CHECK(log.sessions[1].at("strategy") == "genetic");
  CHECK(log.sessions[1].at("seed") == 7);
  CHECK(log.header() == log.sessions[1]);
  CHECK(log.records.size() == 5);  // the second header sits among the evaluations, which read back whole
}

TEST_CASE("the winner goes into the tuned cache and is found again", "[session]") {
  const auto& family = templates::find_family("adamw_single");
  const Problem problem{"f32", {{"tensors", 2}, {"numel", 1000}}};
  ScriptedRunner runner;
  TuneOptions o;
  o.run.time = true;
  const auto s = tune(family, problem, runner, o);
  cache::CacheFile file(test::scratch_dir("session") / "tuned.json");
  file.put(cache_entry(family, problem, runner.device(), s));
  const auto found = cache::TunedCache(file.load()).lookup(cache_key(family, problem, runner.device())).result;
  REQUIRE(found.match == cache::Match::kExact);
  CHECK(Config::from_json(found.entry->config) == s.best->config);
  CHECK(found.entry->key.source_hash == family.source_hash());
}

TEST_CASE("shards split the space: every config is tuned by exactly one shard", "[session]") {
  const auto& family = templates::find_family("adamw_single");
  const Problem problem{"f32", {{"tensors", 2}, {"numel", 1000}}};
  std::set<Config> all;
  std::size_t total = 0;
  for (std::uint64_t i = 0; i < 3; ++i) {
    ScriptedRunner runner;
    TuneOptions o;
    o.finalists = 1;
    o.shard_index = i;
    o.shard_count = 3;
    tune(family, problem, runner, o);
    const Config def = family.default_config(problem);
    for (const auto& c : runner.seen)
      if (!(c == def)) {
        all.insert(c);
        ++total;
      }
  }
  CHECK(total == all.size());  // no config in two shards
  CHECK(all.size() + 1 == family.space().size());  // every config but the default, which each shard measures
}

namespace {
/// A "gpu" runner that compiles nothing itself: it waits (up to a minute)
/// for each variant's binary to appear in the cache, as compiled ahead.
class WaitingRunner final : public Runner {
 public:
  std::string backend() const override { return "gpu"; }
  const DeviceLimits& device() const override { return device_; }
  RunResult run(const Family& family, const Config& c, const Problem& p, const RunOptions&) override {
    const auto rendered = family.render(c, p);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(wait_s);
    bool found = compiler_.cached(rendered, device_.arch);
    while (!found && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      found = compiler_.cached(rendered, device_.arch);
    }
    (found ? compiled_ahead : not_ahead).push_back(c);
    wait_s = 60;  // the default config runs before the search asks for anything
    RunResult r;
    r.ok = true;
    Measurement m;
    m.median_ms = m.p20_ms = m.p80_ms = time_of(c);
    m.repetitions = 1;
    r.timing = m;
    return r;
  }
  std::function<double(const Config&)> time_of = [](const Config& c) {
    return 1.0 + c.at("threads") / 1024.0 + c.at("vec") / 8.0;
  };
  int wait_s = 0;
  std::vector<Config> compiled_ahead, not_ahead;
  DeviceLimits device_ = DeviceLimits::for_arch("sm_80");
  Compiler compiler_;
};
}  // namespace

TEST_CASE("a session compiles ahead what the strategy proposes next", "[session][compile]") {
  const auto dir = test::scratch_dir("ahead-session");
  const test::ScopedEnv cache_dir("KTUNE_CACHE_DIR", dir.c_str());
  const auto& family = templates::find_family("adamw_single");
  const Problem problem{"f32", {{"tensors", 2}, {"numel", 1000}}};
  WaitingRunner runner;
  TuneOptions o;
  o.budget = "6";
  o.finalists = 1;
  o.run.time = true;
  o.compile_ahead_threads = 1;
  tune(family, problem, runner, o);
  // Only the default, run before the search asks for anything, was not
  // compiled ahead; the adaptive strategies' hints are checked in
  // tests/search/upcoming_test.cpp.
  CHECK(runner.not_ahead.size() == 1);
  CHECK(runner.compiled_ahead.size() == 5);  // the budget of 6 counts the default
}

TEST_CASE("a session compiles the family's candidates ahead while the default runs", "[session][compile]") {
  const auto dir = test::scratch_dir("ahead-candidates");
  const test::ScopedEnv cache_dir("KTUNE_CACHE_DIR", dir.c_str());
  const auto& family = templates::find_family("attention_fwd");
  const Problem problem{"bf16", {{"batch", 1}, {"heads", 2}, {"seq", 70}, {"head_dim", 128}, {"causal", 1}}};
  WaitingRunner runner;
  runner.time_of = [&](const Config& c) { return 1.0 + static_cast<double>(family.space().index_of(c).value_or(0)); };
  std::size_t candidates = 0;
  for (const Config& c : family.candidates(problem))
    candidates += c != family.default_config(problem) && family.is_valid(c, problem, runner.device()) ? 1 : 0;
  REQUIRE(candidates >= 2);
  TuneOptions o;
  o.budget = std::to_string(1 + candidates);
  o.finalists = 1;
  o.run.time = true;
  o.compile_ahead_threads = 1;
  tune(family, problem, runner, o);
  CHECK(runner.not_ahead.size() == 1);  // the default
  CHECK(runner.compiled_ahead.size() == candidates);
}

TEST_CASE("an evaluation budget counts the default: --budget N runs N configs", "[session]") {
  const auto& family = templates::find_family("adamw_single");
  const Problem problem{"f32", {{"tensors", 2}, {"numel", 1000}}};
  for (const char* strategy : {"random", "genetic", "annealing", "exhaustive"}) {
    INFO(strategy);
    ScriptedRunner runner;
    TuneOptions o;
    o.run.time = true;
    o.finalists = 1;
    o.strategy = strategy;
    o.budget = "6";
    const auto s = tune(family, problem, runner, o);
    CHECK(runner.calls == 6);
    CHECK(s.evaluations == 6);
    REQUIRE(s.default_run);
    CHECK(s.default_run->config == family.default_config(problem));
  }
}

TEST_CASE("the progress after each evaluation names the best config so far beside its time, and a failure's reason",
          "[session]") {
  // Exhaustive over adamw_single: the default (256 threads, 4 wide), the fastest, first; 1024 threads fail to launch.
  const auto& family = templates::find_family("adamw_single");
  const Problem problem{"f32", {{"tensors", 2}, {"numel", 1000}}};
  ScriptedRunner runner;
  TuneOptions o;
  o.run.time = true;
  o.strategy = "exhaustive";
  std::vector<Record> ran;
  std::vector<std::string> lines;
  const auto s = tune(family, problem, runner, o, [&](const Record& r, const search::Progress& p) {
    ran.push_back(r);
    lines.push_back(standing(r, p, "ETA 1 s"));
  });
  REQUIRE(ran.size() == family.space().size());
  REQUIRE(s.failures > 0);
  std::optional<Record> best;
  std::size_t last_not_best = 0;
  for (std::size_t i = 0; i < ran.size(); ++i) {
    INFO(lines[i]);
    if (ran[i].result.ok && (!best || ran[i].result.timing->median_ms < best->result.timing->median_ms))
      best = ran[i];
    if (!best) {
      CHECK_THAT(lines[i], Catch::StartsWith("best none, ETA 1 s"));
      continue;
    }
    CHECK_THAT(lines[i], Catch::StartsWith(fmt::format("best {:.4f} ms {}, ETA 1 s", best->result.timing->median_ms,
                                                       best->config.str())));
    if (ran[i].config != best->config) ++last_not_best;
    if (!ran[i].result.ok)
      CHECK_THAT(lines[i], Catch::EndsWith(fmt::format("; last {} FAILED: {}", ran[i].config.str(),
                                                       ran[i].result.failure)));
    else
      CHECK_THAT(lines[i], !Catch::Contains("FAILED"));
  }
  CHECK(last_not_best > 0);  // lines where the config just measured is not the best
  // Before any config ran to the end: no time, the failure said.
  search::SearchState state;
  search::Progress none;
  none.state = &state;
  Record failed{Config({{"threads", 1024}, {"vec", 1}}), {}};
  failed.result.failure = "launch: CUDA_ERROR_ILLEGAL_ADDRESS";
  CHECK(standing(failed, none, "ETA ?") ==
        "best none, ETA ?; last {\"threads\":1024,\"vec\":1} FAILED: launch: CUDA_ERROR_ILLEGAL_ADDRESS");
  // A config or reason longer than the line has room for is cut where "..." says so, on one line.
  Record wide{Config({{"block_m", 128}, {"block_n", 64}, {"warps", 8}, {"stages", 3}, {"swizzle", 1}, {"q_in", 1}}),
              {}};
  wide.result.failure = "ptxas error: Entry function uses too much shared memory\n(0x1c000 bytes, 0xc000 max)";
  const std::string cut = standing(wide, none, "ETA ?");
  CHECK(cut == "best none, ETA ?; last {\"block_m\":128,\"block_n\":64,\"q_in\":1,\"stages\":3,\"swizzle\"... "
               "FAILED: ptxas error: Entry function uses too much shared memory\\n...");
}

TEST_CASE("a session measures the family's candidates right after the default, then searches", "[session]") {
  // The CS336 leaderboard's backward: the default on the runner's device (sm_90's: the wgmma pass at 128-query
  // tiles), then its fifteen candidates (the wgmma pass with the longest blocks first, overlapped, with
  // ping-pong, with dQ by bulk reductions, at 64-query tiles, over 64 keys; FlashAttention-2's partition, the
  // family's default, with
  // the longest blocks first, at 4 stages, at 128-query tiles, and the previous default), whatever the strategy.
  const auto& family = templates::find_family("attention_bwd");
  const Problem problem{"bf16", {{"batch", 1}, {"heads", 16}, {"seq", 16384}, {"head_dim", 64}, {"causal", 1}}};
  const auto candidates = family.candidates(problem);
  REQUIRE(candidates.size() == 15);
  const auto time_of = [&](const Config& c) {
    return 1.0 + static_cast<double>(family.space().index_of(c).value_or(0) % 7);
  };
  for (const char* strategy : {"annealing", "auto", "random"}) {
    INFO(strategy);
    ScriptedRunner runner;
    runner.time_of = time_of;
    TuneOptions o;
    o.run.time = true;
    o.finalists = 1;
    o.strategy = strategy;
    o.budget = "19";
    tune(family, problem, runner, o);
    REQUIRE(runner.order.size() == 19);
    REQUIRE(runner.device().arch == "sm_90");
    CHECK(runner.order[0] == default_on(family, problem, runner.device()));
    CHECK(runner.order[0] == *family.arch_default(problem, runner.device()));
    for (std::size_t i = 0; i < candidates.size(); ++i) CHECK(runner.order[1 + i] == candidates[i]);
    const auto measured = runner.order.begin() + 16;  // the default and the candidates
    for (std::size_t i = 16; i < runner.order.size(); ++i)
      CHECK(std::find(runner.order.begin(), measured, runner.order[i]) == measured);
  }
  // A candidate that is the default, or not valid on the device, is not measured twice or at all.
  ScriptedRunner runner;
  runner.time_of = time_of;
  runner.device_ = DeviceLimits::for_arch("sm_89");  // 99 KB of shared memory a block
  REQUIRE_FALSE(family.is_valid(candidates[0], problem, runner.device_));  // wgmma: sm_90 alone
  REQUIRE_FALSE(family.is_valid(candidates[13], problem, runner.device_));  // FlashAttention-2's, 128-query tiles
  TuneOptions o;
  o.finalists = 1;
  o.budget = "4";
  tune(family, problem, runner, o);
  for (const Config& c : runner.order) CHECK(family.is_valid(c, problem, runner.device_));
}

}  // namespace tuner_session_session_test
