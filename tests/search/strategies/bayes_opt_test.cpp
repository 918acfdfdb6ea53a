// Bayesian optimisation does what it is for: on a recorded space it gets
// closer to the optimum than random sampling within a small budget.
#include "search/strategies/bayes_opt.hpp"

#include <catch2/catch.hpp>

#include "search/replay_study.hpp"
#include "search/support_search.hpp"

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
