// Strategy::upcoming, the hint the session compiles ahead from: exact for the
// strategies whose order does not depend on results, and for the adaptive
// ones the config the next step proposes, all valid and unmeasured.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <utility>

#include "search/strategy.hpp"
#include "search/support_search.hpp"

namespace search_upcoming_test {

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

TEST_CASE("auto foresees exactly what it proposes next in its sweep and once the genetic algorithm has taken over",
          "[search][upcoming]") {
  ReplayEvaluator* eval = test::replay_dataset("convolution_milo_A4000");
  // The model proposes the first 40, the sweep of its best configs'
  // neighbourhoods a few dozen more, then the genetic algorithm.
  for (const int steps : {41, 120}) {
    INFO(steps << " evaluations in");
    auto s = make_strategy("auto", {&eval->space(), eval, 7});
    advance(*s, *eval, steps);
    const auto hint = s->upcoming(25);
    REQUIRE(!hint.empty());
    for (const auto& c : hint) CHECK(s->next() == c);
  }
}

TEST_CASE("bayes_opt foresees its next proposal when stalled and when every candidate sleeps",
          "[search][upcoming]") {
  // On convolution A100: seed 5 finds no new best from its 145th evaluation
  // to its 285th, so after 215 its proposals take the stalled turns in
  // rotation (child, neighbour, model); seed 3 after 200 has the optimum and
  // the model has put every unmeasured candidate to sleep, so a neighbour of
  // the best configs comes next.
  ReplayEvaluator* eval = test::replay_dataset("convolution_milo_A100");
  for (const auto& [seed, steps] : {std::pair{5, 215}, std::pair{3, 200}}) {
    INFO("seed " << seed);
    auto s = make_strategy("bayes_opt", {&eval->space(), eval, static_cast<std::uint64_t>(seed)});
    auto measured = advance(*s, *eval, steps);
    for (int step = 0; step < 9; ++step) {
      INFO("step " << step);
      const auto hint = s->upcoming(4);
      REQUIRE(!hint.empty());
      for (const auto& c : hint) {
        CHECK(eval->is_valid(c));
        CHECK(measured.count(c) == 0);
      }
      const auto c = s->next();
      REQUIRE(c);
      CHECK(*c == hint.front());
      s->report(*c, eval->evaluate(*c));
      measured.insert(*c);
    }
  }
}

}  // namespace search_upcoming_test
