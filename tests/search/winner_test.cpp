// The noise-aware winner rule on synthetic noisy timings.
#include "search/winner.hpp"

#include <catch2/catch.hpp>

#include "search/sampling.hpp"

namespace search_winner_test {

using namespace ktune::search;
using ktune::Config;

namespace {
std::vector<double> noisy(double median, double rel_noise, int n, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<double> t;
  for (int i = 0; i < n; ++i) t.push_back(median * (1 + rel_noise * rng.normal()));
  return t;
}
Candidate cand(std::uint64_t order, double median, double noise, std::uint64_t seed, int n = 50) {
  return {order, Config({{"i", static_cast<std::int64_t>(order)}}), noisy(median, noise, n, seed)};
}
}  // namespace

TEST_CASE("winner: configs inside the noise band tie and the smallest index wins", "[search][winner]") {
  // Two configs 0.2 % apart under 2 % noise, one clearly slower: whichever
  // measures faster in a session, the winner is the same (order 3).
  for (std::uint64_t session = 0; session < 20; ++session) {
    const std::vector<Candidate> c = {cand(9, 1.000, 0.02, session * 3 + 1), cand(3, 1.002, 0.02, session * 3 + 2),
                                      cand(1, 1.200, 0.02, session * 3 + 3)};
    const auto r = pick_winner(c);
    REQUIRE(r.found);
    CHECK(c[r.winner].order == 3);
    CHECK(r.tied == 2);
    CHECK_FALSE(r.ranked.back().tied);
    CHECK(r.ranked.back().spread > 0);
  }
}

TEST_CASE("winner: a clearly faster config wins whatever its index", "[search][winner]") {
  const std::vector<Candidate> c = {cand(1, 1.10, 0.01, 1), cand(7, 1.00, 0.01, 2)};
  const auto r = pick_winner(c);
  CHECK(c[r.winner].order == 7);
  CHECK(r.tied == 1);
  CHECK(r.ranked[0].median_ms == Approx(1.0).epsilon(0.01));
  CHECK(r.ranked[0].ci_low_ms <= r.ranked[0].median_ms);
  CHECK(r.ranked[0].ci_high_ms >= r.ranked[0].median_ms);
}

TEST_CASE("winner: configs whose middle repetitions do not overlap are not tied, whatever their outliers",
          "[search][winner]") {
  // p20-p80 0.214-0.271 ms against 0.313-0.334: the first, 23 % faster, wins though its two slow repetitions
  // reach the other's range.
  const std::vector<Candidate> c = {
    {1, Config({{"i", 1}}), {0.305, 0.312, 0.313, 0.32, 0.33, 0.332, 0.333, 0.334, 0.335, 0.34}},
    {5, Config({{"i", 5}}), {0.20, 0.21, 0.215, 0.22, 0.23, 0.24, 0.25, 0.26, 0.315, 0.32}}};
  const auto r = pick_winner(c);
  CHECK(c[r.winner].order == 5);
  CHECK(r.tied == 1);
  CHECK(r.ranked[0].p80_ms < r.ranked[1].p20_ms);
}

TEST_CASE("winner: failures are dropped and nothing finite means no winner", "[search][winner]") {
  const double inf = std::numeric_limits<double>::infinity();
  CHECK_FALSE(pick_winner({{0, Config(), {inf, inf}}}).found);
  const auto r = pick_winner({{0, Config(), {inf}}, {4, Config(), {2.0, 2.1, 1.9}}});
  REQUIRE(r.found);
  CHECK(r.winner == 1);
  CHECK(r.ranked.size() == 1);
  WinnerOptions wide;
  wide.min_relative_band = 0.10;
  const auto r2 = pick_winner({{5, Config(), {1.00, 1.00, 1.00}}, {2, Config(), {1.05, 1.05, 1.05}}}, wide);
  CHECK(r2.winner == 1);  // 5 % slower, inside a 10 % band: the smaller order wins
}

}  // namespace search_winner_test
