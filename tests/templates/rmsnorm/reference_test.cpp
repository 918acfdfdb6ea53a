#include "templates/rmsnorm/reference.hpp"

#include <catch2/catch.hpp>
#include <cmath>

#include "gradcheck.hpp"

namespace templates_rmsnorm_reference_test {

using namespace ktune::templates::rmsnorm;
using ktune::test::max_rel_error;
using ktune::test::numeric_gradient;
using ktune::test::random_values;
using ktune::test::weighted_sum;

TEST_CASE("rmsnorm forward normalises each row by its root mean square", "[rmsnorm]") {
  const std::vector<float> x = {3, 4, 0, 0, 1, 1, 1, 1};
  const std::vector<float> w = {1, 2, 1, 1};
  std::vector<float> y(8), rstd(2);
  rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), 2, 4, 0.0f);
  CHECK(rstd[0] == Approx(1.0 / 2.5));
  CHECK(y[0] == Approx(1.2));
  CHECK(y[1] == Approx(3.2));
  CHECK(y[5] == Approx(2.0));
}

TEST_CASE("rmsnorm backward matches finite differences (fp64)", "[rmsnorm][gradcheck]") {
  const std::int64_t rows = 3, dim = 7;
  auto x = random_values(rows * dim, 1);
  auto w = random_values(dim, 2, 0.5, 1.5);
  const auto r = random_values(rows * dim, 3);
  std::vector<double> y(rows * dim), rstd(rows);
  auto loss = [&] {
    rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), rows, dim, 1e-5);
    return weighted_sum(y, r);
  };
  loss();
  std::vector<double> dx(rows * dim), dw(dim, 0.0);
  rmsnorm_backward(x.data(), w.data(), rstd.data(), r.data(), dx.data(), dw.data(), rows, dim);
  CHECK(max_rel_error(dx, numeric_gradient(x, loss)) < 1e-7);
  CHECK(max_rel_error(dw, numeric_gradient(w, loss)) < 1e-7);
}

}  // namespace templates_rmsnorm_reference_test
