#include "templates/softmax/reference.hpp"

#include <catch2/catch.hpp>

#include "gradcheck.hpp"

using namespace ktune::templates::softmax;
using ktune::test::max_rel_error;
using ktune::test::numeric_gradient;
using ktune::test::random_values;
using ktune::test::weighted_sum;

TEST_CASE("softmax rows sum to one and survive large logits", "[softmax]") {
  const std::vector<float> x = {1000, 1000, 0, 1, 2, 3};
  std::vector<float> y(6);
  softmax_forward(x.data(), y.data(), 2, 3);
  CHECK(y[0] == Approx(0.5));
  CHECK(y[1] == Approx(0.5));
  CHECK(y[2] == Approx(0.0).margin(1e-30));
  CHECK(y[3] + y[4] + y[5] == Approx(1.0));
  CHECK(y[5] / y[4] == Approx(std::exp(1.0)));
}

TEST_CASE("softmax backward matches finite differences (fp64)", "[softmax][gradcheck]") {
  const std::int64_t rows = 4, cols = 5;
  auto x = random_values(rows * cols, 11, -3, 3);
  const auto r = random_values(rows * cols, 12);
  std::vector<double> y(rows * cols), dx(rows * cols);
  auto loss = [&] {
    softmax_forward(x.data(), y.data(), rows, cols);
    return weighted_sum(y, r);
  };
  loss();
  softmax_backward(y.data(), r.data(), dx.data(), rows, cols);
  CHECK(max_rel_error(dx, numeric_gradient(x, loss)) < 1e-7);
}
