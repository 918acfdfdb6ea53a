// Every registered family runs emulated, for each of its problem classes,
// with its default config and a seeded sample of its space, and matches its
// CPU reference. Families added to the registry are covered automatically.
#include <catch2/catch.hpp>

#include <random>

#include "templates/family.hpp"
#include "tuner/emu_runner.hpp"

namespace {

constexpr int kSampled = 2;  // sampled configs per family and problem class, besides the default

std::vector<ktune::Config> configs_for(const ktune::templates::Family& family, const ktune::templates::Problem& problem,
                                       const ktune::templates::DeviceLimits& device) {
  std::vector<ktune::Config> configs = {family.default_config(problem)};
  std::mt19937_64 rng(std::hash<std::string>{}(family.name() + problem.key()));
  const auto& space = family.space();
  for (int attempt = 0; attempt < 200 && static_cast<int>(configs.size()) < 1 + kSampled; ++attempt) {
    auto c = space.at(rng() % space.size());
    if (family.is_valid(c, problem, device) && std::find(configs.begin(), configs.end(), c) == configs.end())
      configs.push_back(std::move(c));
  }
  return configs;
}

}  // namespace

TEST_CASE("every family matches its CPU reference when emulated", "[emu]") {
  ktune::tuner::EmuRunner runner;
  for (const auto* family : ktune::templates::all_families()) {
    for (const auto& problem : family->problem_classes()) {
      for (const auto& config : configs_for(*family, problem, runner.device())) {
        DYNAMIC_SECTION(family->name() << " " << problem.key() << " " << config.str()) {
          ktune::tuner::RunOptions options;
          options.seed = 7;
          const auto result = runner.run(*family, config, problem, options);
          INFO(result.failure);
          CHECK(result.ok);
          CHECK_FALSE(result.timing.has_value());
          for (const auto& [name, error] : result.errors) {
            INFO(name);
            CHECK(error < 1e-2);
          }
        }
      }
    }
  }
}
