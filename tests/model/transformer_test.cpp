#include "model/transformer.hpp"

#include <catch2/catch.hpp>
#include <random>

#include "base/error.hpp"
#include "gradcheck.hpp"
#include "model/device_check.hpp"

namespace model_transformer_test {

using namespace ktune::model;
using ktune::test::random_tokens;

namespace {

ModelConfig micro() {
  ModelConfig c;
  c.name = "micro";
  c.vocab = 11;
  c.d_model = 8;
  c.d_ff = 12;
  c.layers = 2;
  c.heads = 2;
  return c;
}

// Norm gains away from 1, so their gradients are exercised in general position.
template <class T>
void jitter_norms(Transformer<T>& m) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0.5, 1.5);
  for (const auto& info : m.layout().tensors)
    if (info.shape.size() == 1)
      for (auto& w : m.parameter(info.name)) w = static_cast<T>(u(rng));
}

}  // namespace

TEST_CASE("whole-model gradients match central finite differences (fp64, every parameter)",
          "[model][gradcheck]") {
  const RunShape shape{2, 5};
  Transformer<double> m(micro(), shape, Allocation::kTrain, 2);
  jitter_norms(m);
  std::vector<std::int32_t> tokens, targets;
  random_tokens(shape.tokens(), m.config().vocab, 3, tokens, targets);
  m.forward(tokens, targets);
  m.backward();
  const std::vector<double> analytic(m.gradients().begin(), m.gradients().end());
  auto params = m.parameters();
  std::vector<double> numeric(params.size());
  const double h = 1e-6;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const double saved = params[i];
    params[i] = saved + h;
    const double up = m.forward(tokens, targets);
    params[i] = saved - h;
    const double down = m.forward(tokens, targets);
    params[i] = saved;
    numeric[i] = (up - down) / (2 * h);
  }
  for (const auto& info : m.layout().tensors) {
    INFO(info.name);
    const std::vector<double> a(analytic.begin() + info.offset, analytic.begin() + info.offset + info.numel);
    const std::vector<double> n(numeric.begin() + info.offset, numeric.begin() + info.offset + info.numel);
    CHECK(ktune::test::max_rel_error(a, n) < 1e-7);
  }
}

TEST_CASE("fp32 and fp64 models agree and results do not depend on the thread count", "[model]") {
  const RunShape shape{2, 16};
  ModelConfig c = model_config("tiny");
  Transformer<double> ref(c, shape, Allocation::kTrain, 1);
  Transformer<float> one(c, shape, Allocation::kTrain, 1);
  Transformer<float> three(c, shape, Allocation::kTrain, 3);
  std::vector<std::int32_t> tokens, targets;
  random_tokens(shape.tokens(), c.vocab, 5, tokens, targets);
  const double l_ref = ref.forward(tokens, targets);
  const double l_one = one.forward(tokens, targets);
  const double l_three = three.forward(tokens, targets);
  CHECK(l_one == Approx(l_ref).epsilon(1e-5));
  CHECK(l_three == Approx(l_one).epsilon(1e-6));
  ref.backward();
  one.backward();
  three.backward();
  double num = 0, den = 0, num3 = 0;
  for (std::size_t i = 0; i < ref.gradients().size(); ++i) {
    const double g = ref.gradients()[i];
    num += (one.gradients()[i] - g) * (one.gradients()[i] - g);
    num3 += (three.gradients()[i] - g) * (three.gradients()[i] - g);
    den += g * g;
  }
  CHECK(std::sqrt(num / den) < 1e-4);
  CHECK(std::sqrt(num3 / den) < 1e-4);
}

TEST_CASE("forward-only mode reuses one block's activations and gives the same loss", "[model]") {
  const RunShape shape{3, 8};
  ModelConfig c = model_config("tiny");
  Transformer<float> train(c, shape, Allocation::kTrain, 2);
  Transformer<float> infer(c, shape, Allocation::kForwardOnly, 2);
  std::vector<std::int32_t> tokens, targets;
  random_tokens(shape.tokens(), c.vocab, 9, tokens, targets);
  CHECK(infer.forward(tokens, targets) == Approx(train.forward(tokens, targets)).epsilon(1e-6));
  CHECK(infer.allocated_bytes() < train.allocated_bytes());
  CHECK_THROWS_AS(infer.backward(), ktune::Error);
}

TEST_CASE("the model rejects wrong input sizes, out-of-vocabulary tokens and backward before forward", "[model]") {
  const RunShape shape{1, 4};
  Transformer<float> m(model_config("tiny"), shape, Allocation::kTrain, 1);
  std::vector<std::int32_t> tokens(4, 1), targets(4, 2), short_tokens(3, 1);
  CHECK_THROWS_AS(m.backward(), ktune::Error);
  CHECK_THROWS_WITH(m.forward(short_tokens, targets), Catch::Contains("batch*context = 4"));
  tokens[2] = 128;
  CHECK_THROWS_WITH(m.forward(tokens, targets), Catch::Contains("outside the vocabulary"));
}

}  // namespace model_transformer_test
