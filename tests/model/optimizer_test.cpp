#include "model/flat_adamw.hpp"

#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "model/transformer.hpp"
#include "templates/adamw/reference.hpp"

namespace model_optimizer_test {

using namespace ktune::model;

TEST_CASE("threaded AdamW equals one call of the reference over the whole buffer", "[model][adamw]") {
  const std::size_t n = 1001;
  std::vector<float> p(n), g(n);
  for (std::size_t i = 0; i < n; ++i) {
    p[i] = 0.01f * static_cast<float>(i % 17) - 0.05f;
    g[i] = 0.003f * static_cast<float>(i % 13) - 0.02f;
  }
  std::vector<float> p_ref = p, m(n, 0), v(n, 0);
  ktune::templates::adamw::AdamwHyper h;
  h.lr = 1e-2f;
  ktune::test::FlatAdamW opt(n, h);
  Parallel par(3);
  for (int s = 1; s <= 3; ++s) {
    opt.step(p, g, par);
    h.step = s;
    ktune::templates::adamw::adamw_step_reference(p_ref.data(), g.data(), m.data(), v.data(), n, h);
  }
  CHECK(p == p_ref);
  CHECK(opt.steps_taken() == 3);
}

TEST_CASE("the cpu model's AdamW step is the walk's, equal to AdamW over the flat buffer", "[model][adamw]") {
  Transformer<float> model(model_config("tiny"), RunShape{2, 8}, Allocation::kTrain, 2);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> u(-0.1f, 0.1f);
  for (auto& g : model.gradients()) g = u(rng);  // fresh gradients; the moments start at zero
  const std::vector<float> p0(model.parameters().begin(), model.parameters().end());
  const std::int64_t before = model.allocated_bytes();
  std::vector<float> p_ref = p0;
  ktune::templates::adamw::AdamwHyper h;
  h.lr = 1e-2f;
  h.step = 99;  // ignored: each side counts its own steps
  ktune::test::FlatAdamW opt(model.layout().total, h);
  Parallel par(3);
  for (int s = 1; s <= 3; ++s) {
    model.step(h);
    opt.step(p_ref, model.gradients(), par);
  }
  CHECK(model.steps_taken() == 3);
  CHECK(std::vector<float>(model.parameters().begin(), model.parameters().end()) == p_ref);
  CHECK(std::vector<float>(model.parameters().begin(), model.parameters().end()) != p0);
  // The moments exist from the first step on: the plan's step peak.
  CHECK(model.allocated_bytes() == before + opt.state_bytes());
  CHECK(model.allocated_bytes() == model.plan().peak_step());

  Transformer<float> inference(model_config("tiny"), RunShape{2, 8}, Allocation::kForwardOnly, 1);
  CHECK_THROWS_WITH(inference.step(h), Catch::Contains("built for training"));
}

}  // namespace model_optimizer_test
