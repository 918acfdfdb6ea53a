// The short training runs of the model tests: the tiny model, 2 windows of
// 16 tokens a step, on the cpu backend's 2 threads.
#pragma once
#include <cstdint>

#include "model/train.hpp"

namespace ktune::test {

inline model::TrainOptions tiny_run(std::int64_t steps, std::uint64_t seed = 0) {
  model::TrainOptions o;
  o.model = model::model_config("tiny");
  o.shape = model::RunShape{2, 16};
  o.threads = 2;
  o.seed = seed;
  o.steps = steps;
  return o;
}

}  // namespace ktune::test
