// The replay evaluator and Kernel Tuner cache-format export.
#include "search/replay.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

#include "base/error.hpp"
#include "base/files.hpp"
#include "search/kernel_tuner_format.hpp"
#include "search/replay_study.hpp"
#include "search/sampling.hpp"
#include "search/search.hpp"
#include "search/stop.hpp"
#include "search/support_search.hpp"
#include "support.hpp"

namespace search_replay_test {

using namespace ktune::search;
using ktune::Config;

TEST_CASE("replay: recorded space, times, failures and costs", "[search][replay]") {
  ReplayEvaluator* eval = ktune::test::replay_dataset("convolution_milo_A100");
  if (eval == nullptr) {
    WARN("replay datasets not found; skipping");
    return;
  }
  CHECK(eval->space().size() == 16 * 5 * 4 * 4 * 2 * 2 * 2);
  CHECK(eval->recorded() == 4362);
  CHECK(eval->recorded_failures() == 161);
  CHECK(eval->device_name() == "NVIDIA A100-PCIE-40GB");
  const Config first({{"block_size_x", 16}, {"block_size_y", 1}, {"tile_size_x", 1}, {"tile_size_y", 1},
                      {"read_only", 0}, {"use_padding", 0}, {"use_shmem", 0}, {"use_cmem", 1},
                      {"filter_height", 15}, {"filter_width", 15}});
  REQUIRE(eval->is_valid(first));
  const Outcome o = eval->evaluate(first);
  CHECK(o.ok);
  CHECK(o.time_ms == Approx(3.8753279224038124));
  CHECK(o.cost_s == Approx((918.5990339610726 + 126.3829180970788) / 1000));
  CHECK(o.p20_ms <= o.p80_ms);
  Config absent = first;
  absent.set("use_padding", 1);  // padding without shared memory was never recorded
  std::string why;
  CHECK_FALSE(eval->is_valid(absent, &why));
  CHECK_THAT(why, Catch::Contains("not recorded"));
  CHECK(eval->fraction_of_optimum(eval->optimum_ms()) == 1.0);
}

TEST_CASE("replay: validity by a point's positions is validity by its config, at every point", "[search][replay]") {
  ReplayEvaluator* eval = ktune::test::replay_dataset("convolution_milo_A100");
  if (eval == nullptr) {
    WARN("replay datasets not found; skipping");
    return;
  }
  const ktune::Space& space = eval->space();
  std::uint64_t valid_points = 0;
  for (std::uint64_t i = 0; i < space.size(); ++i) {
    const Point p = point_at(space, i);
    const bool by_config = eval->is_valid(config_of(space, p));
    INFO(config_of(space, p).str());
    REQUIRE(eval->is_valid_at(p) == by_config);
    REQUIRE(eval->Evaluator::is_valid_at(p) == by_config);  // the default, through the config
    valid_points += by_config;
  }
  CHECK(valid_points == eval->recorded());
  // What a strategy asks: through the context, with the evaluator's space or another object equal to it.
  const ktune::Space copy = space;
  for (const ktune::Space* s : {&space, &copy}) {
    const StrategyContext context{s, eval, 1};
    std::uint64_t n = 0;
    for (std::uint64_t i = 0; i < space.size(); ++i) n += valid(context, point_at(space, i));
    CHECK(n == eval->recorded());
  }
}

TEST_CASE("replay study: quartiles per budget", "[search][replay]") {
  ReplayEvaluator* eval = ktune::test::replay_dataset("convolution_milo_A4000");
  if (eval == nullptr) {
    WARN("replay datasets not found; skipping");
    return;
  }
  ReplayStudyOptions options;
  options.strategy = "random";
  options.runs = 5;
  options.budgets = {parse_replay_budget("10"), parse_replay_budget("100"), parse_replay_budget("60s")};
  const auto r = run_replay_study(*eval, options);
  REQUIRE(r.budgets.size() == 3);
  CHECK(r.budgets[0].fraction.median <= r.budgets[1].fraction.median);
  CHECK(r.budgets[1].fraction.median <= 1.0);
  CHECK(r.budgets[1].fraction.median > 0.3);
  CHECK_THROWS_AS(parse_replay_budget("lots"), ktune::Error);
}

TEST_CASE("replay study: the median's 95 % interval is the order statistics of least binomial tail, and holds the "
          "median that often",
          "[search][replay]") {
  // P(Bin(n, 1/2) <= m), summed directly in long double (n up to 60 here).
  const auto tail = [](std::size_t n, std::size_t m) {
    long double p = std::pow(0.5L, static_cast<long double>(n)), sum = 0;  // P(B = 0)
    for (std::size_t i = 0; i <= m; ++i) {
      sum += p;
      p = p * static_cast<long double>(n - i) / static_cast<long double>(i + 1);
    }
    return static_cast<double>(sum);
  };
  for (std::size_t n = 1; n <= 60; ++n) {
    const std::size_t l = median_interval_rank(n);
    INFO("n " << n << " l " << l);
    if (n <= 5) {
      CHECK(l == 0);  // two-sided coverage at most 1 - 2^(1-n) < 95 %
      continue;
    }
    REQUIRE(l >= 1);
    CHECK(2 * tail(n, l - 1) <= 0.05);  // [x_l, x_(n+1-l)] covers at least 95 %
    CHECK(2 * tail(n, l) > 0.05);       // a narrower one would not
  }
  std::vector<double> ranks(100);
  for (std::size_t i = 0; i < ranks.size(); ++i) ranks[i] = static_cast<double>(100 - i);  // unsorted
  const Quartiles q = quartiles(ranks);
  CHECK(q.median_lo == static_cast<double>(median_interval_rank(100)));
  CHECK(q.median_hi == static_cast<double>(101 - median_interval_rank(100)));
  CHECK(std::isnan(quartiles({1, 2, 3, 4, 5}).median_lo));
  // Runs that never reached a target (infinity) sort last: a position that falls on a run that did is its value.
  const double never = INFINITY;
  CHECK(quartiles({142, 28, never}).median == 142);
  CHECK(quartiles({142, 28, never, never, 149}).median == 149);
  CHECK(quartiles({142, 28, never, never, 149}).p25 == 142);
  CHECK(std::isinf(quartiles({142, 28, never, never}).median));  // halfway to a run that never did
  CHECK(quartiles({10, 20, never, 40, 50}).p75 == 50);
  // Drawn from an exponential distribution (median ln 2), 40 at a time: the interval holds the median in at least
  // 95 % of 4000 draws, less the sampling error (3 standard errors of 0.35 %).
  std::mt19937_64 rng(7);
  std::exponential_distribution<double> draw(1.0);
  int held = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    std::vector<double> values(40);
    for (auto& v : values) v = draw(rng);
    const Quartiles t = quartiles(values);
    held += t.median_lo <= std::log(2.0) && std::log(2.0) <= t.median_hi;
  }
  CHECK(held >= static_cast<int>(4000 * (0.95 - 3 * 0.0035)));
  CHECK(held <= static_cast<int>(4000 * 0.995));  // and not the whole range
}

TEST_CASE("replay budgets as a share of the brute-force time", "[search][replay]") {
  ReplayEvaluator* eval = ktune::test::replay_dataset("pnpoly_RTX_2080_Ti");
  if (eval == nullptr) {
    WARN("replay dataset pnpoly_RTX_2080_Ti not found; skipping");
    return;
  }
  // The recorded compile + verification + benchmark times of all 4092 configs
  // (bench/peers/kernel_tuner_replay.py sums the same fields: 502 s).
  CHECK(eval->brute_force_s() == Approx(501.95).epsilon(0.001));
  const auto b = parse_replay_budget("10%", eval->brute_force_s());
  CHECK(b.is_time);
  CHECK(b.amount == Approx(eval->brute_force_s() / 10));
  CHECK_THROWS_AS(parse_replay_budget("10%"), ktune::Error);  // no brute-force time given
  ReplayStudyOptions options;
  options.strategy = "exhaustive";
  options.runs = 1;
  options.budgets = {parse_replay_budget("100%", eval->brute_force_s())};
  CHECK(run_replay_study(*eval, options).budgets[0].fraction.median == 1.0);
}

TEST_CASE("replay takes recorded time in hours as tune takes it", "[search][replay]") {
  for (const auto& [text, seconds] : {std::pair{"1h", 3600.0}, std::pair{"0.5h", 1800.0}, std::pair{"90m", 5400.0}}) {
    INFO(text);
    const auto b = parse_replay_budget(text);
    CHECK(b.is_time);
    CHECK(b.amount == seconds);
    CHECK(b.label == text);
  }
  CHECK_THROWS_WITH(parse_replay_budget("1d"), Catch::Contains("recorded time (600s, 10m, 1h)"));
}

TEST_CASE("replay budgets as a tuning session's stop condition: where a plateau ends each run", "[search][replay]") {
  ReplayEvaluator* eval = ktune::test::replay_dataset("convolution_milo_A4000");
  if (eval == nullptr) {
    WARN("replay dataset convolution_milo_A4000 not found; skipping");
    return;
  }
  const double brute = eval->brute_force_s();
  for (const char* text : {"plateau:40", "plateau:40+2%"}) {
    INFO(text);
    // The same seeded run as a tuning session with this stop condition: its length and its best.
    auto strategy = make_strategy("random", {&eval->space(), eval, 7});
    const auto session =
        run_search(*eval, *strategy,
                   *parse_budget(text == std::string("plateau:40") ? "plateau:40"
                                                                   : "plateau:40+" + std::to_string(brute / 50) + "s"));
    ReplayStudyOptions options;
    options.strategy = "random";
    options.runs = 1;
    options.seed = 7;
    // The study runs on past the plateau, to the longest budget.
    options.budgets = {parse_replay_budget("600"), parse_replay_budget(text, brute)};
    const auto r = run_replay_study(*eval, options);
    REQUIRE(r.budgets.size() == 2);
    CHECK(r.budgets[1].budget.stop != nullptr);
    CHECK(r.budgets[1].stopped_evals.median == static_cast<double>(session.state.evaluations));
    CHECK(r.budgets[1].stopped_s.median == Approx(session.state.cost_s));
    CHECK(r.budgets[1].fraction.median == Approx(eval->fraction_of_optimum(session.state.best_ms)));
    CHECK(session.state.evaluations > 40);
    CHECK(session.state.since_improvement == 40);  // the plateau ended it, not the time
  }
  CHECK_THROWS_AS(parse_replay_budget("plateau:40+2%"), ktune::Error);  // no brute-force time given
  CHECK_THROWS_AS(parse_replay_budget("plateau:x", brute), ktune::Error);
  CHECK_THROWS_AS(parse_replay_budget("plateau:40+2q", brute), ktune::Error);
}

TEST_CASE("search records export to Kernel Tuner's cache format and replay back", "[search][replay]") {
  const ktune::Space space({{"block", {64, 128, 256}, ""}, {"vec", {1, 2, 4}, ""}});
  std::vector<Record> records;
  for (std::uint64_t i = 0; i < space.size(); ++i) {
    Outcome o;
    o.cost_s = 0.25;
    o.compile_s = 0.125;  // half of it compiling
    if (i == 4) {
      o.failure = "compile: too many registers";
    } else {
      o.ok = true;
      o.time_ms = 1.0 + static_cast<double>(i);
      o.p20_ms = o.time_ms * 0.99;
      o.p80_ms = o.time_ms * 1.01;
      if (i == 8) o.samples_ms = {9.2, 8.9, 9.0};  // one record keeps its samples
    }
    records.push_back({i, space.at(i), o});
  }
  const auto dir = ktune::test::scratch_dir("kt-export");
  for (const char* name : {"log.json", "log.json.gz"}) {
    write_kernel_tuner_cache(dir / name, space, records, {"NVIDIA H100", "adamw", {16384}});
    const auto doc = read_kernel_tuner_cache(dir / name);
    CHECK(doc["tune_params_keys"] == nlohmann::json({"block", "vec"}));
    CHECK(doc["cache"]["128,2"]["time"] == "CompilationFailedConfig");
    CHECK(doc["cache"]["64,1"]["time"] == 1.0);
    // "times" holds the measured samples, never [p20, median, p80] made up from the summary.
    CHECK(doc["cache"]["256,4"]["times"] == nlohmann::json({9.2, 8.9, 9.0}));
    CHECK(doc["cache"]["256,4"]["time"].get<double>() == Approx((9.2 + 8.9 + 9.0) / 3));  // the mean, as Kernel Tuner's
    CHECK_FALSE(doc["cache"]["64,1"].contains("times"));
    // The compile apart from the rest of the evaluation, in milliseconds (the whole was "benchmark_time").
    CHECK(doc["cache"]["64,1"]["compile_time"] == 125.0);
    CHECK(doc["cache"]["64,1"]["benchmark_time"] == 125.0);
    ReplayEvaluator back(dir / name);
    CHECK(back.recorded() == 9);
    CHECK(back.recorded_failures() == 1);
    CHECK(back.optimum_ms() == 1.0);
    const Outcome o = back.evaluate(space.at(8));
    CHECK(o.time_ms == Approx((9.2 + 8.9 + 9.0) / 3));
    CHECK(o.samples_ms == std::vector<double>{9.2, 8.9, 9.0});
    CHECK(o.cost_s == Approx(0.25));
  }
  // A cache Kernel Tuner was still writing (no closing braces) is closed on read.
  ktune::write_file_atomic(dir / "open.json",
                           "{\"tune_params_keys\": [\"a\"], \"tune_params\": {\"a\": [1, 2]},\n\"cache\": {\n"
                           "\"1\": {\"a\": 1, \"time\": 1.5},\n\"2\": {\"a\": 2, \"time\": 0.5},\n");
  CHECK(read_kernel_tuner_cache(dir / "open.json")["cache"].size() == 2);
  CHECK(ReplayEvaluator(dir / "open.json").optimum_ms() == 0.5);
  ktune::write_file_atomic(dir / "bad.json", "{\"x\": 1}");
  CHECK_THROWS_WITH(ReplayEvaluator(dir / "bad.json"), Catch::Contains("not a Kernel Tuner cache"));
  // A gzip'd file cut short: named once, with zlib's reason.
  std::ifstream in(dir / "log.json.gz", std::ios::binary);
  const std::string gz{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  REQUIRE(gz.size() > 100);
  ktune::write_file_atomic(dir / "cut.json.gz", gz.substr(0, gz.size() / 2));
  const std::string cut = (dir / "cut.json.gz").string();
  CHECK_THROWS_WITH(ReplayEvaluator(cut), "cannot decompress " + cut + ": unexpected end of file");
}

TEST_CASE("replay refuses a file it cannot score: no parameters, no success, a time or cost out of range",
          "[search][replay]") {
  const auto dir = ktune::test::scratch_dir("kt-unscorable");
  const auto refused = [&](const nlohmann::json& doc) {
    ktune::write_file_atomic(dir / "k.json", doc.dump());
    try {
      ReplayEvaluator e(dir / "k.json");
    } catch (const ktune::Error& e) {
      CHECK(e.kind() == ktune::ErrorKind::kInvalidInput);
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const nlohmann::json two = {{"tune_params", {{"a", {1, 2}}}},
                              {"cache", {{"1", {{"a", 1}, {"time", 1.0}}}, {"2", {{"a", 2}, {"time", 2.0}}}}}};
  ktune::write_file_atomic(dir / "two.json", two.dump());
  CHECK(ReplayEvaluator(dir / "two.json").optimum_ms() == 1.0);
  nlohmann::json doc = two;
  doc["cache"]["1"]["time"] = "CompilationFailedConfig";
  doc["cache"]["2"]["time"] = "InvalidConfig";
  CHECK_THAT(refused(doc), Catch::Contains("every one of its 2 recorded configurations failed"));
  doc = two;
  doc["tune_params"] = nlohmann::json::object();
  CHECK_THAT(refused(doc), Catch::Contains("no tunable parameter"));
  doc = two;
  doc["tune_params_keys"] = {1};
  CHECK_THAT(refused(doc), Catch::Contains("\"tune_params_keys\" lists 1, not a parameter's name"));
  doc = two;
  doc["cache"]["1"]["time"] = 0.0;
  CHECK_THAT(refused(doc), Catch::Contains("configuration \"1\" records a time of 0.0 ms"));
  doc["cache"]["1"]["time"] = -1.0;
  CHECK_THAT(refused(doc), Catch::Contains("records a time of -1.0 ms"));
  doc = two;
  doc["cache"]["2"]["compile_time"] = -5000.0;
  CHECK_THAT(refused(doc), Catch::Contains("configuration \"2\" records a compile_time of -5000.0 ms"));
}

TEST_CASE("replay maps non-integer parameter values to indices", "[search][replay]") {
  const auto dir = ktune::test::scratch_dir("kt-labels");
  const nlohmann::json doc = {
      {"device_name", "X"}, {"kernel_name", "k"}, {"tune_params_keys", {"f", "n"}},
      {"tune_params", {{"f", {0.5, 1.5}}, {"n", {1, 2}}}},
      {"cache", {{"0.5,1", {{"f", 0.5}, {"n", 1}, {"time", 2.0}}}, {"1.5,2", {{"f", 1.5}, {"n", 2}, {"time", 1.0}}}}}};
  ktune::write_file_atomic(dir / "k.json", doc.dump());
  ReplayEvaluator e(dir / "k.json");
  CHECK(e.space().param("f").values == std::vector<std::int64_t>{0, 1});
  CHECK(e.value_label("f", 1) == 1.5);
  CHECK(e.value_label("n", 2) == 2);
  CHECK(e.evaluate(Config({{"f", 1}, {"n", 2}})).time_ms == 1.0);
  CHECK_FALSE(e.is_valid(Config({{"f", 0}, {"n", 2}})));
}

TEST_CASE("replay study: a run reached the target when a budget's row says so, its evaluations and time with it",
          "[search][replay]") {
  // 100 recorded points of one second each (a = 1..100); a = 51 is the optimum, every other is slower than 95 % of it.
  nlohmann::json kt = {{"tune_params_keys", {"a"}}, {"tune_params", {{"a", nlohmann::json::array()}}},
                       {"cache", nlohmann::json::object()}};
  for (int a = 1; a <= 100; ++a) {
    kt["tune_params"]["a"].push_back(a);
    kt["cache"][std::to_string(a)] = {{"a", a}, {"time", a == 51 ? 1.0 : 2.0 + a}, {"benchmark_time", 1000.0}};
  }
  const auto dir = ktune::test::scratch_dir("replay-target");
  ktune::write_file_atomic(dir / "kt.json", kt.dump());
  ReplayEvaluator eval(dir / "kt.json");
  ReplayStudyOptions options;
  options.strategy = "exhaustive";  // in index order: the optimum is the 51st evaluation, at 51 s
  options.runs = 1;
  // Reached within the time budget, past the evaluation budget: counted, with its evaluations and time.
  options.budgets = {parse_replay_budget("20"), parse_replay_budget("60s")};
  auto r = run_replay_study(eval, options);
  CHECK(r.budgets[1].fraction.median == 1.0);
  CHECK(r.runs_reaching_target == 1);
  CHECK(r.evals_to_target.median == 51);
  CHECK(r.seconds_to_target.median == Approx(51));
  // The run spends a time budget on the evaluation that crosses it: one past 50.5 s is within no budget.
  options.budgets = {parse_replay_budget("50.5s")};
  r = run_replay_study(eval, options);
  CHECK(r.budgets[0].fraction.median < options.target);
  CHECK(r.runs_reaching_target == 0);
  CHECK_FALSE(std::isfinite(r.evals_to_target.median));
  CHECK_FALSE(std::isfinite(r.seconds_to_target.median));
  // Seeded random runs, one at a time: reached exactly when a budget's row reaches the target, both counts with it.
  options.strategy = "random";
  options.budgets = {parse_replay_budget("20"), parse_replay_budget("60s"), parse_replay_budget("plateau:10")};
  int reached = 0;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    INFO("seed " << seed);
    options.seed = seed;
    r = run_replay_study(eval, options);
    const bool in_a_row = std::any_of(r.budgets.begin(), r.budgets.end(),
                                      [&](const ReplayBudgetResult& b) { return b.fraction.median >= options.target; });
    CHECK(r.runs_reaching_target == (in_a_row ? 1 : 0));
    CHECK(std::isfinite(r.evals_to_target.median) == in_a_row);
    CHECK(std::isfinite(r.seconds_to_target.median) == in_a_row);
    if (in_a_row) CHECK(r.seconds_to_target.median == Approx(r.evals_to_target.median));  // one second each
    reached += in_a_row ? 1 : 0;
  }
  CHECK(reached > 0);
  CHECK(reached < 20);
}

}  // namespace search_replay_test
