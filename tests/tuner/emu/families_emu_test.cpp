// Every registered family runs emulated, for each of its problem classes,
// with its default config and a seeded sample of its space, and matches its
// CPU reference. Families added to the registry are covered automatically.
#include <catch2/catch.hpp>

#include "templates/family.hpp"
#include "templates/sampled_configs.hpp"
#include "tuner/run/emu_runner.hpp"

namespace tuner_emu_families_emu_test {

namespace {
constexpr int kSampled = 2;  // sampled configs per family and problem class, besides the default
}  // namespace

TEST_CASE("every family matches its CPU reference when emulated", "[emu]") {
  ktune::tuner::EmuRunner runner;
  for (const auto* family : ktune::templates::all_families()) {
    for (const auto& problem : family->problem_classes()) {
      for (const auto& config : ktune::test::sampled_configs(*family, problem, runner.device(), kSampled)) {
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

}  // namespace tuner_emu_families_emu_test
