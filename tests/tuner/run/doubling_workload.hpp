// The workload of the isolated-runner tests' planted families: y = 2x over
// the problem's n floats, x random, y's expected values set.
#pragma once
#include <random>
#include <vector>

#include "templates/render.hpp"

namespace ktune::test {

inline templates::Workload doubling_workload(const templates::Problem& p, std::uint64_t seed) {
  using namespace ktune::templates;
  std::mt19937_64 rng(seed);
  const auto x = random_floats(rng, static_cast<std::size_t>(p.dim("n")), -1, 1);
  std::vector<float> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = 2 * x[i];
  Workload w;
  w.buffers.push_back(make_buffer("x", Role::kInput, DType::kF32, x));
  w.buffers.push_back(make_buffer("y", Role::kOutput, DType::kF32, std::vector<float>(x.size())));
  set_expected(w.buffers.back(), y);
  return w;
}

/// Its buffers' shapes, without making it.
inline std::vector<templates::BufferShape> doubling_shapes(const templates::Problem& p) {
  using namespace ktune::templates;
  return {buffer_shape("x", Role::kInput, DType::kF32, p.dim("n")),
          buffer_shape("y", Role::kOutput, DType::kF32, p.dim("n"))};
}

}  // namespace ktune::test
