#include "templates/residual/reference.hpp"

#include <catch2/catch.hpp>
#include <vector>

namespace templates_residual_reference_test {

using namespace ktune::templates::residual;

TEST_CASE("residual add and its backward accumulate elementwise", "[residual]") {
  std::vector<double> x = {1, 2, 3};
  const std::vector<double> y = {10, 20, 30};
  residual_add(x.data(), y.data(), 3);
  CHECK(x == std::vector<double>{11, 22, 33});
  // out = x + f(x): d out/dx = 1 + f'(x), so the stream's gradient gains the branch's.
  std::vector<double> dstream = {1, 1, 1};
  residual_backward(dstream.data(), y.data(), 3);
  CHECK(dstream == std::vector<double>{11, 21, 31});
}

}  // namespace templates_residual_reference_test
