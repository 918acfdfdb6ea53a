#include "templates/cross_entropy/reference.hpp"

#include <catch2/catch.hpp>
#include <cmath>

#include "base/error.hpp"
#include "gradcheck.hpp"

namespace templates_cross_entropy_reference_test {

using namespace ktune::templates::cross_entropy;
using ktune::test::max_rel_error;
using ktune::test::numeric_gradient;
using ktune::test::random_values;

TEST_CASE("cross-entropy forward is logsumexp minus the target logit", "[cross_entropy]") {
  const std::vector<float> logits = {0, 0, 0, 0, 1000, 0};
  const std::vector<std::int32_t> targets = {2, 1};
  std::vector<float> losses(2), lse(2);
  cross_entropy_forward(logits.data(), targets.data(), losses.data(), lse.data(), 2, 3);
  CHECK(losses[0] == Approx(std::log(3.0)));
  CHECK(losses[1] == Approx(0.0).margin(1e-6));
  const std::vector<std::int32_t> bad = {3, 0};
  CHECK_THROWS_AS(cross_entropy_forward(logits.data(), bad.data(), losses.data(), lse.data(), 2, 3), ktune::Error);
}

TEST_CASE("cross-entropy backward (in place) matches finite differences (fp64)", "[cross_entropy][gradcheck]") {
  const std::int64_t rows = 3, vocab = 6;
  const std::vector<std::int32_t> targets = {5, 0, 2};
  auto logits = random_values(rows * vocab, 41, -3, 3);
  std::vector<double> losses(rows), lse(rows);
  auto loss = [&] {
    cross_entropy_forward(logits.data(), targets.data(), losses.data(), lse.data(), rows, vocab);
    return (losses[0] + losses[1] + losses[2]) / rows;
  };
  loss();
  std::vector<double> grad = logits;
  cross_entropy_backward(grad.data(), targets.data(), lse.data(), 1.0 / rows, grad.data(), rows, vocab);
  CHECK(max_rel_error(grad, numeric_gradient(logits, loss)) < 1e-7);
}

}  // namespace templates_cross_entropy_reference_test
