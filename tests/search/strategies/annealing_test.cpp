// Simulated annealing restarts its walk from new random configs as it cools,
// so a search of a few hundred evaluations starts from several regions.
#include "search/strategies/annealing.hpp"

#include <catch2/catch.hpp>
#include <cmath>

#include "search/sampling.hpp"
#include "search/search.hpp"

namespace search_strategies_annealing_test {

using namespace ktune::search;

namespace {
/// Six parameters of ten values each, no constraint, every config as fast as
/// any other: every move is accepted, so walks end only by cooling.
class FlatEvaluator final : public Evaluator {
 public:
  FlatEvaluator() {
    std::vector<ktune::Param> params;
    for (int i = 0; i < 6; ++i) params.push_back({"p" + std::to_string(i), {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, ""});
    space_ = ktune::Space(params);
  }
  const ktune::Space& space() const override { return space_; }
  bool is_valid(const ktune::Config&, std::string* = nullptr) const override { return true; }
  Outcome evaluate(const ktune::Config&) override {
    Outcome o;
    o.ok = true;
    o.time_ms = o.p20_ms = o.p80_ms = 1.0;
    return o;
  }

 private:
  ktune::Space space_;
};

/// Proposals that differ in more than one parameter from every config proposed before.
int walks_started(const std::vector<Point>& order) {
  int starts = 0;
  for (std::size_t k = 0; k < order.size(); ++k) {
    bool near = false;
    for (std::size_t j = 0; j < k && !near; ++j) {
      int differing = 0;
      for (std::size_t i = 0; i < order[k].size(); ++i) differing += order[k][i] != order[j][i];
      near = differing <= 1;
    }
    if (!near) ++starts;
  }
  return starts;
}
}  // namespace

TEST_CASE("annealing starts about three walks in 400 evaluations", "[search]") {
  FlatEvaluator eval;
  Annealing::Options options;
  // Evaluations per walk: cooling from t_start to t_min by alpha per evaluation.
  const double per_walk = std::log(options.t_min / options.t_start) / std::log(options.alpha);
  REQUIRE(per_walk < 150);
  for (std::uint64_t seed : {1, 2, 3}) {
    StrategyContext context{&eval.space(), &eval, seed};
    Annealing strategy(context, options);
    std::vector<Point> order;
    SearchCallbacks callbacks;
    callbacks.on_record = [&](const Record& r) { order.push_back(point_of(eval.space(), r.config)); };
    run_search(eval, strategy, EvaluationBudget(400), callbacks);
    REQUIRE(order.size() == 400);
    INFO("seed " << seed);
    // The first walk, then one per ~135 evaluations; a random start lands one
    // parameter from an earlier config with probability under 2 %.
    CHECK(walks_started(order) >= 3);
    CHECK(walks_started(order) <= 4);
  }
}

}  // namespace search_strategies_annealing_test
