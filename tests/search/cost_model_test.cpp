// The cost model ranks configs by what they cost to evaluate, and the
// time-aware genetic algorithm spends less per evaluation for it.
#include "search/cost_model.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <set>

#include "search/search.hpp"
#include "search/stop.hpp"
#include "search/strategies/genetic.hpp"
#include "search/strategies/local_search.hpp"
#include "search/support_search.hpp"

namespace search_cost_model_test {

using namespace ktune::search;

TEST_CASE("the cost model ranks unseen configs by an additive cost", "[search][cost]") {
  const ktune::Space space({{"a", {0, 1, 2, 3, 4, 5}, ""}, {"b", {0, 1, 2, 3}, ""}, {"c", {0, 1, 2, 3, 4}, ""}});
  std::mt19937_64 gen(std::random_device{}());
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  // A random log cost per value of each parameter.
  std::vector<std::vector<double>> term(3);
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t v = 0; v < space.params()[i].values.size(); ++v) term[i].push_back(u(gen));
  auto cost = [&](const Point& p) { return std::exp(term[0][p[0]] + term[1][p[1]] + term[2][p[2]]); };

  CostModel model(space);
  CHECK(model.predict({0, 0, 0}) == 1.0);  // nothing known yet
  std::vector<Point> seen, unseen;
  for (std::uint64_t i = 0; i < space.size(); ++i) (gen() % 2 == 0 ? seen : unseen).push_back(point_at(space, i));
  for (const Point& p : seen) model.add(p, cost(p));
  model.add({0, 0, 0}, 0.0);  // ignored: no cost recorded
  CHECK(model.observations() == seen.size());
  // Pairs of unseen configs whose true costs differ by more than 2x are mostly
  // ordered right (the shrinkage towards the mean blurs close pairs).
  int pairs = 0, right = 0;
  for (std::size_t i = 0; i < unseen.size(); ++i)
    for (std::size_t j = i + 1; j < unseen.size(); ++j) {
      const double ci = cost(unseen[i]), cj = cost(unseen[j]);
      if (std::max(ci, cj) < 2 * std::min(ci, cj)) continue;
      ++pairs;
      right += (ci < cj) == (model.predict(unseen[i]) < model.predict(unseen[j]));
    }
  REQUIRE(pairs > 100);
  CHECK(right >= 0.9 * pairs);
}

namespace {
/// The bowl, with an evaluation cost that grows `spread`-fold along z.
class CostlyBowl final : public Evaluator {
 public:
  explicit CostlyBowl(double spread = 10) : spread(spread) {}
  const ktune::Space& space() const override { return bowl.space(); }
  bool is_valid(const ktune::Config& c, std::string* why = nullptr) const override { return bowl.is_valid(c, why); }
  Outcome evaluate(const ktune::Config& c) override {
    Outcome o = bowl.evaluate(c);
    o.cost_s = std::pow(spread, c.at("z") / 3.0);
    return o;
  }
  double spread;
  ktune::test::BowlEvaluator bowl;
};

/// Mean cost per evaluation of the genetic algorithm over seeds, 60 evaluations each.
double mean_cost(int cost_pool) {
  double cost = 0;
  std::uint64_t evaluations = 0;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    CostlyBowl eval;
    Genetic::Options options;
    options.cost_pool = cost_pool;
    Genetic g({&eval.space(), &eval, seed}, options);
    const auto r = run_search(eval, g, EvaluationBudget(60));
    cost += r.state.cost_s;
    evaluations += r.state.evaluations;
  }
  return cost / static_cast<double>(evaluations);
}
}  // namespace

TEST_CASE("the time-aware genetic algorithm proposes cheaper configs", "[search][cost][genetic]") {
  const double plain = mean_cost(1), aware = mean_cost(2);
  INFO("mean cost per evaluation: " << plain << " s plain, " << aware << " s time-aware");
  CHECK(aware < 0.9 * plain);
}

TEST_CASE("the time-aware genetic algorithm leaves alone a brood whose costs differ little",
          "[search][cost][genetic]") {
  // Costs within 10 % of each other: no child is above 1.2 times the
  // brood's median, so the children come in the order they were bred, as
  // when every config costs the same. Keeping the cheapest instead would
  // reorder them.
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    INFO("seed " << seed);
    auto proposals = [&](double spread) {
      CostlyBowl eval(spread);
      Genetic::Options options;
      options.cost_pool = 2;
      Genetic g({&eval.space(), &eval, seed}, options);
      std::vector<ktune::Config> out;
      for (int i = 0; i < 60; ++i) {
        const auto c = g.next();
        REQUIRE(c);
        g.report(*c, eval.evaluate(*c));
        out.push_back(*c);
      }
      return out;
    };
    CHECK(proposals(1.1) == proposals(1.0));
  }
}

TEST_CASE("the time-aware walk tries the neighbours predicted to cost over their median last",
          "[search][cost][local_search]") {
  CostlyBowl eval;
  CostModel model(eval.space());
  for (std::uint64_t i = 0; i < eval.space().size(); ++i) {
    const Point p = point_at(eval.space(), i);
    model.add(p, eval.evaluate(config_of(eval.space(), p)).cost_s);
  }
  int costly_seen = 0, climbs = 0;
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    INFO("seed " << seed);
    auto hint = [&](const CostModel* cost) {
      LocalSearch::Options options;
      options.cost = cost;
      LocalSearch s({&eval.space(), &eval, seed}, options);
      const auto start = s.next();
      REQUIRE(start);
      s.report(*start, eval.evaluate(*start));
      return s.upcoming(100);  // the start's neighbours, in the order they are tried
    };
    const auto plain = hint(nullptr), aware = hint(&model);
    if (plain.empty()) continue;  // the start failed to compile (z = 3): no climb from it
    ++climbs;
    REQUIRE(std::set<ktune::Config>(plain.begin(), plain.end()) == std::set<ktune::Config>(aware.begin(), aware.end()));
    std::vector<double> cost;
    for (const auto& c : aware) cost.push_back(model.predict(point_of(eval.space(), c)));
    std::vector<double> sorted = cost;
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2), sorted.end());
    const double limit = LocalSearch::Options{}.cost_cut * sorted[sorted.size() / 2];
    // The cheaper ones first, in the plain walk's order; then the costlier.
    std::vector<ktune::Config> cheap;
    for (const auto& c : plain)
      if (model.predict(point_of(eval.space(), c)) <= limit) cheap.push_back(c);
    CHECK(std::equal(cheap.begin(), cheap.end(), aware.begin()));
    for (std::size_t i = cheap.size(); i < aware.size(); ++i) CHECK(cost[i] > limit);
    costly_seen += static_cast<int>(aware.size() - cheap.size());
  }
  CHECK(climbs >= 5);
  CHECK(costly_seen > 0);
}

TEST_CASE("local search walks on from the configs measured before it was asked (a session's default and "
          "candidates)",
          "[search][local_search]") {
  CostlyBowl eval;
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    INFO("seed " << seed);
    // A point that runs, told first, as run_search tells the configs it measures before asking.
    std::optional<ktune::Config> first;
    for (std::uint64_t i = seed * 7; !first; i += 13) {
      const ktune::Config c = config_of(eval.space(), point_at(eval.space(), i % eval.space().size()));
      if (eval.is_valid(c) && eval.evaluate(c).ok) first = c;
    }
    LocalSearch s({&eval.space(), &eval, seed}, {});
    s.report(*first, eval.evaluate(*first));
    const auto next = s.next();
    REQUIRE(next);
    const auto around = valid_neighbours({&eval.space(), &eval, seed}, point_of(eval.space(), *first), false);
    CHECK(std::find(around.begin(), around.end(), point_of(eval.space(), *next)) != around.end());
  }
}

}  // namespace search_cost_model_test
