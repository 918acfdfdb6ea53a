// The CS336 initialisation (model/parameters.hpp): each tensor's spread and
// truncation, RMSNorm gains at 1, and blocks of a tensor drawn from streams
// of their own, reproducible from the seed.
#include "model/parameters.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/config.hpp"

namespace model_parameters_test {

using namespace ktune::model;

TEST_CASE("the initialisation: truncated normals of the CS336 spreads, gains at 1, seeded block by block",
          "[model]") {
  ModelConfig c = model_config("tiny");
  c.vocab = 20000;  // an embedding of 20000 x 64 values: a block of 2^20 and a part
  const ParameterLayout layout = parameter_layout(c);
  std::vector<float> a(static_cast<std::size_t>(layout.total), NAN), b(a.size(), NAN), other(a.size(), NAN);
  init_parameters<float>(layout, a.data(), 7);
  init_parameters<float>(layout, b.data(), 7);
  init_parameters<float>(layout, other.data(), 8);
  CHECK(a == b);
  for (const auto& t : layout.tensors) {
    INFO(t.name);
    const float* p = a.data() + t.offset;
    if (t.shape.size() == 1) {
      CHECK(std::all_of(p, p + t.numel, [](float v) { return v == 1.0f; }));
      continue;
    }
    const double sigma =
        t.name == "token_embeddings.weight" ? 1.0 : std::sqrt(2.0 / static_cast<double>(t.shape[0] + t.shape[1]));
    double sum = 0, sq = 0, largest = 0;
    for (std::int64_t i = 0; i < t.numel; ++i) {
      sum += p[i];
      sq += static_cast<double>(p[i]) * p[i];
      largest = std::max(largest, std::abs(static_cast<double>(p[i])));
    }
    const double n = static_cast<double>(t.numel), mean = sum / n, std = std::sqrt(sq / n - mean * mean);
    CHECK(largest <= 3 * sigma * (1 + 1e-6));
    CHECK(largest > 2 * sigma);  // the tails are there
    // A normal truncated at 3 sigma has 0.9866 sigma.
    CHECK(std == Approx(0.9866 * sigma).epsilon(t.numel > 10000 ? 0.02 : 0.1));
    CHECK(std::abs(mean) < 4 * sigma / std::sqrt(n));
    CHECK_FALSE(std::equal(p, p + t.numel, other.data() + t.offset));  // another seed, other values
  }
  // The embedding's blocks come from streams of their own: the second does not repeat the first.
  const auto& e = layout.tensors.front();
  REQUIRE(e.name == "token_embeddings.weight");
  REQUIRE(e.numel > 1000 + (1 << 20));
  const float* p = a.data() + e.offset;
  CHECK_FALSE(std::equal(p, p + 1000, p + (1 << 20)));
}

}  // namespace model_parameters_test
