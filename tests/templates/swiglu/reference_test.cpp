#include "templates/swiglu/reference.hpp"

#include <catch2/catch.hpp>
#include <cmath>

#include "gradcheck.hpp"

namespace templates_swiglu_reference_test {

using namespace ktune::templates::swiglu;
using ktune::test::max_rel_error;
using ktune::test::numeric_gradient;
using ktune::test::random_values;
using ktune::test::weighted_sum;

TEST_CASE("swiglu forward is silu(a) * b", "[swiglu]") {
  const std::vector<float> a = {0, 1, -2}, b = {5, 2, 3};
  std::vector<float> h(3);
  swiglu_forward(a.data(), b.data(), h.data(), 3);
  CHECK(h[0] == 0.0f);
  CHECK(h[1] == Approx(2.0 / (1.0 + std::exp(-1.0))));
  CHECK(h[2] == Approx(3.0 * -2.0 / (1.0 + std::exp(2.0))));
}

TEST_CASE("swiglu backward matches finite differences (fp64)", "[swiglu][gradcheck]") {
  const std::int64_t n = 17;
  auto a = random_values(n, 21, -4, 4);
  auto b = random_values(n, 22, -2, 2);
  const auto r = random_values(n, 23);
  std::vector<double> h(n), da(n), db(n);
  auto loss = [&] {
    swiglu_forward(a.data(), b.data(), h.data(), n);
    return weighted_sum(h, r);
  };
  swiglu_backward(a.data(), b.data(), r.data(), da.data(), db.data(), n);
  CHECK(max_rel_error(da, numeric_gradient(a, loss)) < 1e-7);
  CHECK(max_rel_error(db, numeric_gradient(b, loss)) < 1e-7);
}

}  // namespace templates_swiglu_reference_test
