// The configs the every-family tests run: a family's default for a problem,
// then a sample of other valid points of its space, seeded by the family and
// problem so every run checks the same ones.
#pragma once
#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "templates/family.hpp"

namespace ktune::test {

inline std::vector<Config> sampled_configs(const templates::Family& family, const templates::Problem& problem,
                                           const templates::DeviceLimits& device, int sampled) {
  std::vector<Config> configs = {family.default_config(problem)};
  std::mt19937_64 rng(std::hash<std::string>{}(family.name() + problem.key()));
  const auto& space = family.space();
  for (int attempt = 0; attempt < 200 && static_cast<int>(configs.size()) < 1 + sampled; ++attempt) {
    auto c = space.at(rng() % space.size());
    if (family.is_valid(c, problem, device) && std::find(configs.begin(), configs.end(), c) == configs.end())
      configs.push_back(std::move(c));
  }
  return configs;
}

}  // namespace ktune::test
