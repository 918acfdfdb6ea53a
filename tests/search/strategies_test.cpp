// Every registered strategy: deterministic for a seed, within its budget,
// never proposes an invalid config, on the recorded replay datasets and on a
// synthetic space; random sampling stays lazy on a huge space.
#include <catch2/catch.hpp>
#include <set>

#include "base/error.hpp"
#include "search/sampling.hpp"
#include "search/search.hpp"
#include "search/strategy.hpp"
#include "search/support_search.hpp"

namespace search_strategies_test {

using namespace ktune::search;
using ktune::Config;

namespace {
std::vector<Config> run_once(Evaluator& eval, const std::string& name, std::uint64_t seed, std::uint64_t budget,
                             SearchResult* result = nullptr) {
  StrategyContext ctx{&eval.space(), &eval, seed};
  auto strategy = make_strategy(name, ctx);
  std::vector<Config> order;
  SearchCallbacks cb;
  cb.on_record = [&](const Record& r) { order.push_back(r.config); };
  const auto r = run_search(eval, *strategy, EvaluationBudget(budget), cb);
  if (result) *result = r;
  return order;
}
}  // namespace

TEST_CASE("registry knows the strategies and rejects unknown names", "[search]") {
  const auto names = strategy_names();
  for (const char* n : {"auto", "exhaustive", "random", "genetic", "annealing", "bayes_opt"})
    CHECK(std::find(names.begin(), names.end(), n) != names.end());
  ktune::test::BowlEvaluator eval;
  CHECK_THROWS_WITH(make_strategy("hill", {&eval.space(), &eval, 0}), Catch::Contains("known: "));
}

TEST_CASE("strategies on the replay datasets: deterministic, within budget, valid only", "[search][replay]") {
  const std::vector<std::string> datasets = {"convolution_milo_A100", "convolution_milo_A4000",
                                             "dedispersion_milo_A100"};
  for (const auto& dataset : datasets) {
    ReplayEvaluator* eval = ktune::test::replay_dataset(dataset);
    if (eval == nullptr) {
      WARN("replay dataset " << dataset << " not found; skipping");
      return;
    }
    for (const auto& name : strategy_names()) {
      if (name == "exhaustive") continue;
      const std::uint64_t budget = 120;
      SearchResult r1, r2, r3;
      const auto a = run_once(*eval, name, 7, budget, &r1);
      const auto b = run_once(*eval, name, 7, budget, &r2);
      const auto c = run_once(*eval, name, 8, budget, &r3);
      INFO(dataset << " " << name);
      CHECK(a == b);
      CHECK(a != c);
      CHECK(a.size() == budget);
      CHECK(r1.rejected == 0);
      CHECK(std::set<Config>(a.begin(), a.end()).size() == a.size());
      CHECK(r1.best.has_value());
    }
  }
}

TEST_CASE("strategies on a small space: budget, validity, exhaustion", "[search]") {
  ktune::test::BowlEvaluator eval;
  for (const auto& name : strategy_names()) {
    INFO(name);
    SearchResult r;
    const auto a = run_once(eval, name, 3, 30, &r);
    CHECK(a.size() <= 30);
    CHECK(a.size() >= 20);
    CHECK_FALSE(eval.invalid_evaluated);
    CHECK(r.rejected == 0);
    CHECK(run_once(eval, name, 3, 30) == a);
  }
  // Random sampling without replacement covers every valid point once.
  const auto all = run_once(eval, "random", 11, 1000);
  CHECK(all.size() == 8 * 6 * 4 - 4 * 4);
  CHECK(std::set<Config>(all.begin(), all.end()).size() == all.size());
}

TEST_CASE("every strategy given a budget beyond the space measures each valid config once", "[search]") {
  // A budget the space runs out before ends with the space measured, not with a strategy that stopped proposing
  // once random draws kept finding measured configs (the genetic algorithm stopped at 78 of 176 here).
  ktune::test::BowlEvaluator eval;
  eval.known_valid = 176;
  for (const auto& name : strategy_names())
    for (std::uint64_t seed : {1, 2, 3}) {
      INFO(name << " seed " << seed);
      SearchResult r;
      const auto order = run_once(eval, name, seed, 100000, &r);
      CHECK(order.size() == 176);
      CHECK(std::set<Config>(order.begin(), order.end()).size() == order.size());
      CHECK(r.stopped_by == "space exhausted (all 176 valid configs measured)");
    }
  // A recorded space of 4092 configs, 358 of them failing.
  ReplayEvaluator* pnpoly = ktune::test::replay_dataset("pnpoly_RTX_2080_Ti");
  if (pnpoly == nullptr) {
    WARN("replay dataset pnpoly_RTX_2080_Ti not found; skipping");
    return;
  }
  for (const auto& name : strategy_names()) {
    if (name == "bayes_opt") continue;  // its model makes covering them ~20 s (`ktune replay --budget 4092`)
    INFO(name);
    const auto order = run_once(*pnpoly, name, 1, 100000);
    CHECK(order.size() == pnpoly->space().size());
    CHECK(std::set<Config>(order.begin(), order.end()).size() == order.size());
  }
}

TEST_CASE("scanning for a valid point finds the few left and wraps round the space", "[search]") {
  ktune::test::BowlEvaluator eval;
  StrategyContext ctx{&eval.space(), &eval, 0};
  const std::uint64_t n = eval.space().size();
  Rng rng(3);
  // Only index 0 (x 0, y 1, z 0: valid) fresh: a scan from any start reaches it, round the end of the space.
  for (int i = 0; i < 50; ++i) {
    const auto p = scan_for_valid_point(ctx, rng, [&](std::uint64_t k) { return k == 0; });
    REQUIRE(p.has_value());
    CHECK(index_of(eval.space(), *p) == 0);
  }
  // The first and the last fresh: each is found from some start.
  std::set<std::uint64_t> found;
  for (int i = 0; i < 200; ++i) {
    const auto p = scan_for_valid_point(ctx, rng, [&](std::uint64_t k) { return k == 0 || k == n - 1; });
    REQUIRE(p.has_value());
    found.insert(index_of(eval.space(), *p));
  }
  CHECK(found == std::set<std::uint64_t>{0, n - 1});
  // Fresh but invalid (x 0, y 4): none; and none within a limit too short to reach the fresh one.
  const std::uint64_t invalid = index_of(eval.space(), {0, 2, 0});
  CHECK_FALSE(scan_for_valid_point(ctx, rng, [&](std::uint64_t k) { return k == invalid; }).has_value());
  CHECK_FALSE(scan_for_valid_point(ctx, rng, [&](std::uint64_t k) { return k == 0; }, 0).has_value());
}

TEST_CASE("random sampling is lazy on a 10^12-point space", "[search]") {
  std::vector<ktune::Param> params;
  for (int i = 0; i < 12; ++i) params.push_back({"p" + std::to_string(i), {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, ""});
  const ktune::Space space(params);
  StrategyContext ctx{&space, nullptr, 5};
  auto s = make_strategy("random", ctx);
  std::set<Config> seen;
  for (int i = 0; i < 2000; ++i) {
    auto c = s->next();
    REQUIRE(c.has_value());
    seen.insert(*c);
  }
  CHECK(seen.size() == 2000);
  LazyPermutation perm(10, 1);
  std::set<std::uint64_t> drawn;
  while (auto v = perm.next()) drawn.insert(*v);
  CHECK(drawn.size() == 10);
  CHECK(*drawn.rbegin() == 9);
}

}  // namespace search_strategies_test
