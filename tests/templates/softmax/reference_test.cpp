#include "templates/softmax/reference.hpp"

#include <catch2/catch.hpp>

#include "gradcheck.hpp"

namespace templates_softmax_reference_test {

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

TEST_CASE("scaled causal softmax: masked entries are 0, backward matches finite differences (fp64)",
          "[softmax][gradcheck]") {
  const std::int64_t seq = 4, rows = 2 * seq;  // two (seq, seq) blocks
  const double scale = 0.3;
  auto x = random_values(rows * seq, 13, -3, 3);
  const auto r = random_values(rows * seq, 14);
  std::vector<double> y(rows * seq), dx(rows * seq);
  auto loss = [&] {
    softmax_forward(x.data(), y.data(), rows, seq, scale, true);
    return weighted_sum(y, r);
  };
  loss();
  for (std::int64_t row = 0; row < rows; ++row) {
    double sum = 0;
    for (std::int64_t c = 0; c < seq; ++c) {
      if (c > row % seq) CHECK(y[row * seq + c] == 0.0);
      sum += y[row * seq + c];
    }
    CHECK(sum == Approx(1.0));
  }
  CHECK(y[1 * seq + 1] / y[1 * seq + 0] == Approx(std::exp(scale * (x[1 * seq + 1] - x[1 * seq + 0]))));
  softmax_backward(y.data(), r.data(), dx.data(), rows, seq, scale, true);
  CHECK(max_rel_error(dx, numeric_gradient(x, loss)) < 1e-7);
  // The unscaled, unmasked overloads are the scale-1, non-causal case.
  std::vector<double> y1(rows * seq), y2(rows * seq);
  softmax_forward(x.data(), y1.data(), rows, seq);
  softmax_forward(x.data(), y2.data(), rows, seq, 1.0, false);
  CHECK(y1 == y2);
}

}  // namespace templates_softmax_reference_test
