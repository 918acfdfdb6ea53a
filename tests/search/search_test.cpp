// The search driver and stop conditions on a synthetic space.
#include "search/search.hpp"

#include <catch2/catch.hpp>

#include "base/error.hpp"
#include "search/strategies/exhaustive.hpp"
#include "search/strategy.hpp"
#include "search/support_search.hpp"

namespace search_search_test {

using namespace ktune::search;
using ktune::Config;

namespace {
/// Proposes a fixed list, repeats and an invalid config included.
class Scripted final : public Strategy {
 public:
  explicit Scripted(std::vector<Config> list) : list_(std::move(list)) {}
  std::optional<Config> next() override {
    if (i_ >= list_.size()) return std::nullopt;
    return list_[i_++];
  }
  void report(const Config& c, const Outcome& o) override { reports.emplace_back(c, o); }
  std::vector<std::pair<Config, Outcome>> reports;

 private:
  std::vector<Config> list_;
  std::size_t i_ = 0;
};
Config cfg(int x, int y, int z) { return Config({{"x", x}, {"y", y}, {"z", z}}); }
}  // namespace

TEST_CASE("driver: records in order, skips invalid and repeats, goes on after failures", "[search]") {
  ktune::test::BowlEvaluator eval;
  Scripted strategy({cfg(1, 1, 0), cfg(0, 8, 0), cfg(2, 2, 3), cfg(1, 1, 0), cfg(5, 8, 1), cfg(4, 8, 1)});
  std::vector<Record> records;
  int progress_calls = 0;
  SearchCallbacks cb;
  cb.on_record = [&](const Record& r) { records.push_back(r); };
  cb.on_progress = [&](const Progress& p) {
    ++progress_calls;
    CHECK(p.state->evaluations == records.size());
  };
  const SearchResult r = run_search(eval, strategy, Unbounded(), cb);
  CHECK_FALSE(eval.invalid_evaluated);
  CHECK(eval.evaluations == 4);  // the invalid config and the repeat are not evaluated
  REQUIRE(records.size() == 4);
  for (std::size_t i = 0; i < records.size(); ++i) CHECK(records[i].sequence == i);
  CHECK(records[1].config == cfg(2, 2, 3));
  CHECK_FALSE(records[1].outcome.ok);
  CHECK(std::isinf(records[1].outcome.time_ms));
  CHECK(r.state.failures == 1);
  CHECK(r.rejected == 1);
  CHECK(r.repeats == 1);
  CHECK(r.best == cfg(5, 8, 1));
  CHECK(r.best_outcome.time_ms == 1.0);
  CHECK(r.state.cost_s == 2.0);
  CHECK(progress_calls == 4);
  CHECK(r.stopped_by == "strategy exhausted");
  CHECK(strategy.reports.size() == 6);  // every proposal gets an answer
}

TEST_CASE("stop conditions: evaluations, time, plateau, any-of", "[search]") {
  ktune::test::BowlEvaluator eval;
  StrategyContext ctx{&eval.space(), &eval, 0};
  SECTION("evaluations") {
    Exhaustive s(ctx);
    const auto r = run_search(eval, s, EvaluationBudget(7));
    CHECK(r.state.evaluations == 7);
    CHECK_THAT(r.stopped_by, Catch::Contains("7 evaluations"));
  }
  SECTION("time (sum of cost_s)") {
    Exhaustive s(ctx);
    const auto r = run_search(eval, s, TimeBudget(3.0));
    CHECK(r.state.evaluations == 6);
    CHECK(r.state.cost_s == 3.0);
  }
  SECTION("plateau") {
    Exhaustive s(ctx);
    const auto r = run_search(eval, s, Plateau(5));
    CHECK(r.state.since_improvement == 5);
  }
  SECTION("parsed budgets") {
    Exhaustive s(ctx);
    const auto stop = parse_budget("100+2s");
    const auto r = run_search(eval, s, *stop);
    CHECK(r.state.evaluations == 4);
    CHECK(parse_budget("15m")->describe() == "900 s of evaluation time");
    CHECK(parse_budget("plateau:20")->describe() == "20 evaluations without improvement");
    CHECK_THROWS_AS(parse_budget("ten"), ktune::Error);
    CHECK_THROWS_WITH(parse_budget("5x"), Catch::Contains("a budget is"));
    for (const char* none : {"0", "0s", "0m+10"})
      CHECK_THROWS_WITH(parse_budget(none), Catch::Contains("runs nothing; give at least 1"));
    for (const char* negative : {"-3", "-5s", "10+-1m"})
      CHECK_THROWS_WITH(parse_budget(negative), Catch::Contains("': a budget is not negative; give at least 1"));
  }
}

TEST_CASE("ETA comes from the budget's progress", "[search]") {
  ktune::test::BowlEvaluator eval;
  StrategyContext ctx{&eval.space(), &eval, 0};
  Exhaustive s(ctx);
  std::vector<double> etas;
  SearchCallbacks cb;
  cb.on_progress = [&](const Progress& p) { etas.push_back(p.eta_s); };
  run_search(eval, s, EvaluationBudget(4), cb);
  REQUIRE(etas.size() == 4);
  CHECK(etas[0] == Approx(1.5));  // 1 of 4 done at 0.5 s each
  CHECK(etas[3] == 0);
  // A budget the space runs out before: the ETA is the space's (what is
  // left of it, at most), not the budget's.
  etas.clear();
  Exhaustive all(ctx);
  const auto r = run_search(eval, all, EvaluationBudget(1000000), cb);
  const auto n = static_cast<double>(eval.space().size());
  REQUIRE(r.state.evaluations > 1);
  REQUIRE(etas.size() == r.state.evaluations);
  CHECK(etas[0] <= 0.5 * n);
  CHECK(etas.back() <= 0.5 * (n - static_cast<double>(r.state.evaluations)) + 1e-9);
}

TEST_CASE("an evaluator that knows its valid points has the ETA count what is left of them", "[search]") {
  // 192 points, 176 valid: a strategy that proposes valid points only covers the space at 176, not 192.
  ktune::test::BowlEvaluator eval;
  eval.known_valid = 176;
  StrategyContext ctx{&eval.space(), &eval, 0};
  auto random = make_strategy("random", ctx);
  std::vector<Progress> seen;
  SearchCallbacks cb;
  cb.on_progress = [&](const Progress& p) { seen.push_back(p); };
  run_search(eval, *random, EvaluationBudget(1000000), cb);
  REQUIRE(seen.size() >= 2);
  CHECK(seen[0].valid_points == 176);
  CHECK(seen[0].eta_s == Approx(0.5 * 175));  // 175 valid points left at 0.5 s each
  CHECK(seen[1].eta_s == Approx(0.5 * 174));
}

TEST_CASE("a strategy that stops proposing before the valid configs are covered has converged and says how far",
          "[search]") {
  ktune::test::BowlEvaluator eval;
  eval.known_valid = 176;
  Scripted strategy({cfg(1, 1, 0), cfg(2, 2, 1), cfg(3, 4, 2)});
  CHECK(run_search(eval, strategy, Unbounded()).stopped_by == "strategy converged (3 of 176 valid configs measured)");
  // Where the valid configs are not known, it is the strategy that ran out.
  eval.known_valid = 0;
  Scripted again({cfg(1, 1, 0)});
  CHECK(run_search(eval, again, Unbounded()).stopped_by == "strategy exhausted");
}

TEST_CASE("configs evaluated first are charged to the budget: a budget of 5 is 5 evaluations in all", "[search]") {
  ktune::test::BowlEvaluator eval;
  StrategyContext ctx{&eval.space(), &eval, 0};
  Exhaustive s(ctx);
  // As a session does: the default config first.
  const Config def = cfg(5, 8, 1);
  std::vector<Record> records;
  SearchCallbacks cb;
  cb.on_record = [&](const Record& r) { records.push_back(r); };
  const auto r = run_search(eval, s, EvaluationBudget(5), cb, {def});
  CHECK(eval.evaluations == 5);  // the default and 4 of the strategy's
  CHECK(r.state.evaluations == 5);
  REQUIRE(records.size() == 5);
  CHECK(records[0].config == def);
  CHECK(r.best == def);  // the first one counts for the best too
  for (const auto& [config, n] : eval.counts) CHECK(n == 1);
}

TEST_CASE("configs evaluated first are reported to the strategy before it proposes any", "[search]") {
  ktune::test::BowlEvaluator eval;
  Scripted strategy({cfg(1, 1, 0), cfg(5, 8, 1)});
  // The default and a candidate; the strategy then proposes one new config and one of those.
  const auto r = run_search(eval, strategy, Unbounded(), {}, {cfg(4, 8, 1), cfg(5, 8, 1)});
  CHECK(eval.evaluations == 3);
  REQUIRE(strategy.reports.size() == 4);
  CHECK(strategy.reports[0].first == cfg(4, 8, 1));
  CHECK(strategy.reports[1].first == cfg(5, 8, 1));
  CHECK(strategy.reports[1].second.time_ms == 1.0);
  CHECK(strategy.reports[2].first == cfg(1, 1, 0));
  CHECK(strategy.reports[3].first == cfg(5, 8, 1));  // proposed again: its outcome from memory
  CHECK(r.repeats == 1);
}

}  // namespace search_search_test
