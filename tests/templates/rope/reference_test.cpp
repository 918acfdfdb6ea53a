#include "templates/rope/reference.hpp"

#include <catch2/catch.hpp>
#include <cmath>

#include "gradcheck.hpp"

namespace templates_rope_reference_test {

using namespace ktune::templates::rope;
using ktune::test::max_rel_error;
using ktune::test::numeric_gradient;
using ktune::test::random_values;
using ktune::test::weighted_sum;

TEST_CASE("rope rotates interleaved pairs by position * theta^(-2i/d)", "[rope]") {
  const std::int64_t seq = 3, heads = 1, dim = 4;
  std::vector<double> cos_t(seq * dim / 2), sin_t(seq * dim / 2);
  rope_tables(seq, dim, 10000.0, cos_t.data(), sin_t.data());
  // (batch 1, seq 3, 1 head, dim 4): every pair (1, 0)
  std::vector<double> x = {1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0}, y(12);
  rope_forward(x.data(), y.data(), cos_t.data(), sin_t.data(), seq, heads, dim, 0, seq);
  CHECK(y[0] == Approx(1.0));  // position 0: identity
  CHECK(y[1] == Approx(0.0));
  CHECK(y[8] == Approx(std::cos(2.0)));  // position 2, pair 0: angle 2
  CHECK(y[9] == Approx(std::sin(2.0)));
  CHECK(y[10] == Approx(std::cos(2.0 / 100.0)));  // pair 1: angle 2 * 10000^(-1/2)
  CHECK(y[11] == Approx(std::sin(2.0 / 100.0)));
}

TEST_CASE("rope backward matches finite differences (fp64), positions wrap per sequence", "[rope][gradcheck]") {
  const std::int64_t batch = 2, seq = 3, heads = 2, dim = 6, n = batch * seq;
  std::vector<double> cos_t(seq * dim / 2), sin_t(seq * dim / 2);
  rope_tables(seq, dim, 10000.0, cos_t.data(), sin_t.data());
  auto x = random_values(n * heads * dim, 51);
  const auto r = random_values(n * heads * dim, 52);
  std::vector<double> y(x.size()), dx(x.size());
  auto loss = [&] {
    rope_forward(x.data(), y.data(), cos_t.data(), sin_t.data(), seq, heads, dim, 0, 2);
    rope_forward(x.data(), y.data(), cos_t.data(), sin_t.data(), seq, heads, dim, 2, n);
    return weighted_sum(y, r);
  };
  rope_backward(r.data(), dx.data(), cos_t.data(), sin_t.data(), seq, heads, dim, 0, n);
  CHECK(max_rel_error(dx, numeric_gradient(x, loss)) < 1e-7);
  // Token 3 is position 0 of the second sequence: unrotated.
  loss();
  for (std::int64_t i = 0; i < heads * dim; ++i) CHECK(y[3 * heads * dim + i] == Approx(x[3 * heads * dim + i]));
}

}  // namespace templates_rope_reference_test
