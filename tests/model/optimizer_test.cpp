#include "model/optimizer.hpp"

#include <catch2/catch.hpp>

#include "templates/adamw/reference.hpp"

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
  AdamW opt(n, h);
  Parallel par(3);
  for (int s = 1; s <= 3; ++s) {
    opt.step(p, g, par);
    h.step = s;
    ktune::templates::adamw::adamw_step_reference(p_ref.data(), g.data(), m.data(), v.data(), n, h);
  }
  CHECK(p == p_ref);
  CHECK(opt.steps_taken() == 3);
}
