// Bayesian optimisation does what it is for: on a recorded space it gets
// closer to the optimum than random sampling within a small budget.
#include "search/strategies/bayes_opt.hpp"

#include <catch2/catch.hpp>

#include "search/replay_study.hpp"
#include "search/search.hpp"
#include "search/stop.hpp"
#include "search/support_search.hpp"

namespace search_strategies_bayes_opt_test {

using namespace ktune::search;

TEST_CASE("bayes_opt beats random sampling in median at a small budget", "[search][replay]") {
  ReplayEvaluator* eval = ktune::test::replay_dataset("dedispersion_milo_A100");
  if (eval == nullptr) {
    WARN("replay dataset dedispersion_milo_A100 not found; skipping");
    return;
  }
  ReplayStudyOptions options;
  options.runs = 10;
  options.budgets = {parse_replay_budget("30")};
  options.strategy = "random";
  const double random = run_replay_study(*eval, options).budgets[0].fraction.median;
  options.strategy = "bayes_opt";
  const auto bayes = run_replay_study(*eval, options).budgets[0].fraction;
  INFO("median fraction of the optimum after 30 evaluations: random " << random << ", bayes_opt " << bayes.median);
  CHECK(bayes.median > random);
  CHECK(bayes.median >= 0.993);
}

// On convolution A100 the optimum is isolated: every config within 95 % of it
// is the optimum itself, its neighbours are at 0.71 of it and below, and a
// smooth model ranks the region of the 0.931 runner-up above it. bayes_opt
// once stopped there: every unmeasured candidate fell asleep (ruled out by
// the model), and only 17 of 50 runs reached the optimum within 800
// evaluations. Now each run spends its whole budget, and when stalled takes
// turns of recombination, neighbours of the best configs and the model: all
// 50 reach it, in a median of 232 evaluations (bench/results/replay.md).
TEST_CASE("bayes_opt does not stall short of an isolated optimum while the budget lasts", "[search][replay]") {
  ReplayEvaluator* eval = ktune::test::replay_dataset("convolution_milo_A100");
  if (eval == nullptr) {
    WARN("replay dataset convolution_milo_A100 not found; skipping");
    return;
  }
  for (const std::uint64_t seed : {3u, 19u}) {  // seeds that stopped at 162 evaluations, and stalled at 0.931 to 800
    BayesOpt s({&eval->space(), eval, seed});
    const auto r = run_search(*eval, s, EvaluationBudget(600));
    CHECK(r.state.evaluations == 600);
  }
  ReplayStudyOptions options;
  options.runs = 8;
  options.strategy = "bayes_opt";
  options.budgets = {parse_replay_budget("600")};
  const auto study = run_replay_study(*eval, options);
  INFO("evaluations to 95 % of the optimum: median " << study.evals_to_target.median << ", p75 "
                                                     << study.evals_to_target.p75);
  CHECK(study.runs_reaching_target == options.runs);
  CHECK(study.evals_to_target.median <= 400);
}

}  // namespace search_strategies_bayes_opt_test
