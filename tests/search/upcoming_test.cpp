// Strategy::upcoming, the hint the session compiles ahead from: exact for the
// strategies whose order does not depend on results, and for the adaptive
// ones the config the next step proposes, all valid and unmeasured.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "search/strategy.hpp"
#include "search/support_search.hpp"

using namespace ktune;
using namespace ktune::search;

namespace {

/// Runs `steps` evaluations of `s` on `eval`, reporting each outcome.
std::set<Config> advance(Strategy& s, Evaluator& eval, int steps) {
  std::set<Config> measured;
  for (int i = 0; i < steps; ++i) {
    const auto c = s.next();
    REQUIRE(c);
    s.report(*c, eval.evaluate(*c));
    measured.insert(*c);
  }
  return measured;
}

}  // namespace

TEST_CASE("exhaustive, random and genetic foresee exactly what they propose next", "[search][upcoming]") {
  for (const char* name : {"exhaustive", "random", "genetic"}) {
    INFO(name);
    ReplayEvaluator* eval = test::replay_dataset("convolution_milo_A4000");
    auto s = make_strategy(name, {&eval->space(), eval, 7});
    advance(*s, *eval, 10);
    const auto hint = s->upcoming(25);
    // Genetic foresees the rest of the generation in flight, no further.
    if (std::string(name) == "genetic") {
      REQUIRE(!hint.empty());
    } else {
      REQUIRE(hint.size() == 25);
    }
    for (const auto& c : hint) CHECK(s->next() == c);
  }
}

TEST_CASE("local search, bayes_opt, annealing and auto foresee their next proposal among valid, unmeasured configs",
          "[search][upcoming]") {
  for (const char* name : {"local_search", "bayes_opt", "annealing", "auto"}) {
    INFO(name);
    ReplayEvaluator* eval = test::replay_dataset("convolution_milo_A4000");
    auto s = make_strategy(name, {&eval->space(), eval, 3});
    const auto measured = advance(*s, *eval, 30);
    const auto hint = s->upcoming(8);
    REQUIRE(!hint.empty());
    CHECK(hint.size() <= 8);
    for (const auto& c : hint) {
      CHECK(eval->is_valid(c));
      CHECK(measured.count(c) == 0);
    }
    CHECK(s->next() == hint.front());
  }
}

TEST_CASE("auto foresees exactly what it proposes next once the genetic algorithm has taken over",
          "[search][upcoming]") {
  ReplayEvaluator* eval = test::replay_dataset("convolution_milo_A4000");
  auto s = make_strategy("auto", {&eval->space(), eval, 7});
  advance(*s, *eval, 50);  // the model proposes the first 40
  const auto hint = s->upcoming(25);
  REQUIRE(!hint.empty());
  for (const auto& c : hint) CHECK(s->next() == c);
}
