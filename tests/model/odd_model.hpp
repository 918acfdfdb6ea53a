// The odd shape of the model tests: the head_dim-80 model of the 2.7B size,
// cut down: 3 heads (odd), vocabulary 97; the tests run it at context 13.
#pragma once
#include <cstdint>

#include "model/config.hpp"

namespace ktune::test {

inline model::ModelConfig odd_model(std::int64_t layers = 1) {
  model::ModelConfig c;
  c.name = "odd";
  c.vocab = 97;
  c.d_model = 240;
  c.d_ff = 320;
  c.layers = layers;
  c.heads = 3;
  return c;
}

}  // namespace ktune::test
