// The default strategy: the same proposals for the same seed, stops at
// evaluation and time budgets, and on every shared recorded space reaches
// 95 % of the optimum within Kernel Tuner's best strategy's median evaluations.
#include "search/strategies/auto.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "search/replay_study.hpp"
#include "search/sampling.hpp"
#include "search/search.hpp"
#include "search/stop.hpp"
#include "search/support_search.hpp"

namespace search_strategies_auto_test {

using namespace ktune::search;

namespace {

std::vector<ktune::Config> proposals(std::uint64_t seed, int n) {
  ReplayEvaluator* eval = ktune::test::replay_dataset("convolution_milo_A4000");
  Auto s({&eval->space(), eval, seed});
  std::vector<ktune::Config> out;
  EvaluationBudget stop(static_cast<std::uint64_t>(n));
  SearchCallbacks callbacks;
  callbacks.on_record = [&](const Record& r) { out.push_back(r.config); };
  run_search(*eval, s, stop, callbacks);
  return out;
}

}  // namespace

TEST_CASE("auto proposes the same configs for the same seed", "[search][auto]") {
  if (ktune::test::replay_dataset("convolution_milo_A4000") == nullptr) {
    WARN("replay dataset convolution_milo_A4000 not found; skipping");
    return;
  }
  const auto a = proposals(5, 80);
  REQUIRE(a.size() == 80);
  CHECK(a == proposals(5, 80));
  CHECK(a != proposals(6, 80));
}

TEST_CASE("auto measures the adjacent neighbours of the model's three best configs right after the model",
          "[search][auto]") {
  ReplayEvaluator* eval = ktune::test::replay_dataset("convolution_milo_A4000");
  if (eval == nullptr) {
    WARN("replay dataset convolution_milo_A4000 not found; skipping");
    return;
  }
  for (const std::uint64_t seed : {1, 2, 3}) {
    INFO("seed " << seed);
    const StrategyContext context{&eval->space(), eval, seed};
    Auto s(context);
    std::vector<Record> records;
    EvaluationBudget stop(200);
    SearchCallbacks callbacks;
    callbacks.on_record = [&](const Record& r) { records.push_back(r); };
    run_search(*eval, s, stop, callbacks);
    const std::size_t model = Auto::Options{}.model_evals;
    REQUIRE(records.size() > model);
    // The model's three best, and their unmeasured one-step neighbours.
    std::vector<Record> first(records.begin(), records.begin() + static_cast<std::ptrdiff_t>(model));
    std::stable_sort(first.begin(), first.end(), [](const Record& a, const Record& b) {
      return a.outcome.time_ms < b.outcome.time_ms;  // failures are +inf
    });
    std::set<ktune::Config> before, sweep;
    for (std::size_t i = 0; i < model; ++i) before.insert(records[i].config);
    for (std::size_t i = 0; i < 3; ++i)
      for (const Point& q : valid_neighbours(context, point_of(eval->space(), first[i].config), true))
        if (!before.count(config_of(eval->space(), q))) sweep.insert(config_of(eval->space(), q));
    REQUIRE(!sweep.empty());
    REQUIRE(records.size() >= model + sweep.size());
    std::set<ktune::Config> next;
    for (std::size_t i = model; i < model + sweep.size(); ++i) next.insert(records[i].config);
    CHECK(next == sweep);
  }
}

TEST_CASE("auto stops at an evaluation budget and at a time budget", "[search][auto]") {
  ktune::test::BowlEvaluator eval;  // every evaluation costs 0.5 s
  SECTION("evaluations") {
    Auto s({&eval.space(), &eval, 3});
    const auto r = run_search(eval, s, EvaluationBudget(20));
    CHECK(r.state.evaluations == 20);
    CHECK(eval.evaluations == 20);
  }
  SECTION("time") {
    Auto s({&eval.space(), &eval, 3});
    const auto r = run_search(eval, s, TimeBudget(7.0));
    CHECK(r.state.evaluations == 14);
    CHECK(r.state.cost_s == Approx(7.0));
  }
  CHECK_FALSE(eval.invalid_evaluated);
}

// Kernel Tuner 1.5.0's best strategy per space over seeds 1-200: the lowest
// median evaluations to 95 % of the optimum among its seven strategies
// (genetic_algorithm, pso, diff_evo, simulated_annealing, dual_annealing,
// greedy_ils, random_sample), and the highest median fraction of the optimum
// any of them holds at 5 % and at 10 % of the brute-force time
// (bench/results/replay.md has every figure), measured with
//   bench/peers/kernel_tuner_replay.py --dataset ../shared/replay/<space>.json.gz --strategy <strategy>
//     --runs 200 --seed 1 --budget 5,10,25,50,100,200,400,<max>,5%,10% --max-fevals <max>
// (max: 400 pnpoly, 800 convolution, 1200 dedispersion and gemm).
//
// Dedispersion A100 at 5 %: genetic_algorithm's median, 0.9996915 (its runs
// end at 1200 evaluations, before 5 % of the brute-force time, and are scored
// where they end), printed 1.000 in the tables; the next best, pso's, is
// 0.9993831.
struct PeerFigure {
  const char* space;
  const char* strategy;  ///< the best by evaluations to 95 %
  double median_evals;   ///< its median evaluations to 95 %, seeds 1-200
  double fraction_5pc;   ///< the best median fraction at 5 % of the brute-force time
  double fraction_10pc;  ///< and at 10 %
};
constexpr PeerFigure kKernelTunerBest[] = {
    {"convolution_milo_A100", "genetic_algorithm", 181, 1.0, 1.0},
    {"convolution_milo_A4000", "pso", 91.5, 0.996, 1.0},
    {"convolution_milo_W6600", "pso", 199.5, 0.990, 1.0},
    {"convolution_RTX_3090", "simulated_annealing", 53, 1.0, 1.0},
    {"dedispersion_milo_A100", "genetic_algorithm", 2, 0.9996915, 1.0},
    {"dedispersion_milo_W6600", "dual_annealing", 42.5, 1.0, 1.0},
    {"gemm_RTX_3090", "dual_annealing", 157, 1.0, 1.0},
    {"pnpoly_RTX_2080_Ti", "dual_annealing", 23, 1.0, 1.0},
};

ReplayStudyResult study(ReplayEvaluator& eval, std::vector<ReplayBudget> budgets) {
  ReplayStudyOptions options;
  options.strategy = "auto";
  options.runs = 50;
  options.seed = 1;
  options.target = 0.95;
  options.budgets = std::move(budgets);
  return run_replay_study(eval, options);
}

TEST_CASE("auto reaches 95 % of the optimum within Kernel Tuner's best median evaluations on every shared space",
          "[search][auto][replay]") {
  for (const PeerFigure& peer : kKernelTunerBest) {
    INFO(peer.space << ": Kernel Tuner's " << peer.strategy << " needs a median of " << peer.median_evals);
    ReplayEvaluator* eval = ktune::test::replay_dataset(peer.space);
    if (eval == nullptr) {
      WARN("replay dataset " << peer.space << " not found; skipping");
      continue;
    }
    // Runs end at the peer's median: a run that has not reached 95 % by then
    // counts as never reaching it, which is all the median needs.
    const auto r = study(*eval, {parse_replay_budget(std::to_string(static_cast<int>(peer.median_evals)))});
    INFO("auto: median " << r.evals_to_target.median << " (" << r.runs_reaching_target << "/50 runs reached it)");
    CHECK(r.evals_to_target.median <= peer.median_evals);
  }
}

TEST_CASE("auto holds at least Kernel Tuner's best fraction of the optimum at 5 % and 10 % of the brute-force time",
          "[search][auto][replay]") {
  for (const PeerFigure& peer : kKernelTunerBest) {
    INFO(peer.space);
    ReplayEvaluator* eval = ktune::test::replay_dataset(peer.space);
    if (eval == nullptr) {
      WARN("replay dataset " << peer.space << " not found; skipping");
      continue;
    }
    const auto r = study(*eval, {parse_replay_budget("5%", eval->brute_force_s()),
                                 parse_replay_budget("10%", eval->brute_force_s())});
    // At 5 % a median 0.05 % short passes: on dedispersion A100 the two best
    // configs are 0.062 % apart, and Kernel Tuner's figure there is the mean
    // of the two (exactly half of its 200 runs had the best one by then).
    // Whether the median of 50 runs has it is a coin toss; over seeds 1-200
    // auto's median holds the second best, as it did before it became
    // time-aware (bench/results/replay.md).
    CHECK(r.budgets[0].fraction.median >= peer.fraction_5pc - 0.0005);
    CHECK(r.budgets[1].fraction.median >= peer.fraction_10pc);
  }
}

}  // namespace search_strategies_auto_test
