#include "templates/embedding/reference.hpp"

#include <catch2/catch.hpp>

#include "base/error.hpp"
#include "gradcheck.hpp"

namespace templates_embedding_reference_test {

using namespace ktune::templates::embedding;
using ktune::test::max_rel_error;
using ktune::test::numeric_gradient;
using ktune::test::random_values;
using ktune::test::weighted_sum;

TEST_CASE("embedding forward gathers rows and rejects out-of-vocabulary tokens", "[embedding]") {
  const std::vector<float> table = {0, 1, 10, 11, 20, 21};  // (3, 2)
  const std::vector<std::int32_t> tokens = {2, 0, 2};
  std::vector<float> out(6);
  embedding_forward(tokens.data(), table.data(), out.data(), 3, 2, 3);
  CHECK(out == std::vector<float>{20, 21, 0, 1, 20, 21});
  const std::vector<std::int32_t> bad = {3};
  CHECK_THROWS_AS(embedding_forward(bad.data(), table.data(), out.data(), 1, 2, 3), ktune::Error);
}

TEST_CASE("embedding backward (repeated tokens) matches finite differences (fp64)", "[embedding][gradcheck]") {
  const std::int64_t vocab = 5, dim = 3, n = 6;
  const std::vector<std::int32_t> tokens = {1, 4, 1, 0, 1, 4};
  auto table = random_values(vocab * dim, 31);
  const auto r = random_values(n * dim, 32);
  std::vector<double> out(n * dim);
  auto loss = [&] {
    embedding_forward(tokens.data(), table.data(), out.data(), n, dim, vocab);
    return weighted_sum(out, r);
  };
  std::vector<double> dtable(vocab * dim, 0.0);
  embedding_backward(tokens.data(), r.data(), dtable.data(), n, dim, 0, 2);  // split columns
  embedding_backward(tokens.data(), r.data(), dtable.data(), n, dim, 2, dim);
  CHECK(max_rel_error(dtable, numeric_gradient(table, loss)) < 1e-7);
}

}  // namespace templates_embedding_reference_test
