// The Gaussian process: incremental updates agree with a refactorisation,
// the posterior interpolates, and the fit finds which dimension matters.
#include "search/gaussian_process.hpp"

#include <catch2/catch.hpp>
#include <cmath>

#include "search/sampling.hpp"

namespace search_gaussian_process_test {

using namespace ktune::search;

namespace {
double target(const std::vector<double>& x) { return std::sin(6 * x[0]) + 0.3 * x[1]; }
}  // namespace

TEST_CASE("gaussian process: incremental observations match a refactorisation", "[search]") {
  Rng rng(3);
  std::vector<std::vector<double>> xs;
  std::vector<double> ys;
  for (int i = 0; i < 12; ++i) {
    xs.push_back({rng.real(), rng.real()});
    ys.push_back(target(xs.back()));
  }
  const GaussianProcess::Hyper hyper{{0.4, 0.8}, 1e-4};
  GaussianProcess grown(2), batch(2);
  std::vector<std::vector<double>> candidates = {{0.1, 0.9}, {0.5, 0.5}, {0.95, 0.05}, xs[4]};
  for (const auto& c : candidates) {
    grown.add_candidate(c.data());
    batch.add_candidate(c.data());
  }
  grown.reset({xs[0], xs[1]}, {ys[0], ys[1]}, hyper);
  for (std::size_t i = 2; i < xs.size(); ++i) grown.observe(xs[i].data(), ys[i]);
  batch.reset(xs, ys, hyper);
  for (std::size_t id = 0; id < candidates.size(); ++id) {
    double m1, s1, m2, s2;
    grown.predict(id, &m1, &s1);
    batch.predict(id, &m2, &s2);
    CHECK(m1 == Approx(m2).margin(1e-9));
    CHECK(s1 == Approx(s2).margin(1e-9));
  }
  // A candidate at an observed point: the posterior sits on the observation.
  double mean, sd;
  batch.predict(3, &mean, &sd);
  CHECK(mean == Approx(ys[4]).margin(0.02));
  CHECK(sd < 0.05);
  // Retired and dormant candidates stop being updated; a reset wakes dormant ones.
  batch.retire(0);
  batch.set_dormant(1);
  CHECK(batch.retired(0));
  CHECK_FALSE(batch.active(1));
  batch.reset(xs, ys, hyper);
  CHECK(batch.retired(0));
  CHECK(batch.active(1));
}

TEST_CASE("gaussian process: the fit gives an irrelevant dimension a long length scale", "[search]") {
  Rng rng(5);
  std::vector<std::vector<double>> xs;
  std::vector<double> ys;
  for (int i = 0; i < 40; ++i) {
    xs.push_back({rng.real(), rng.real()});
    ys.push_back(std::sin(6 * xs.back()[0]));
  }
  const auto h = GaussianProcess::fit(xs, ys);
  REQUIRE(h.length_scales.size() == 2);
  CHECK(h.length_scales[1] > 2 * h.length_scales[0]);
}

}  // namespace search_gaussian_process_test
