// On a GPU: every registered family matches its CPU reference for each of its
// problem classes, with its default config and a seeded sample of its space
// (fresh random inputs, outputs poisoned first). The GPU twin of
// emu_families_emu_test.cpp; skipped without a device.
#include <catch2/catch.hpp>

#include "support.hpp"
#include "templates/family.hpp"
#include "templates/sampled_configs.hpp"
#include "tuner/run/gpu_runner.hpp"

using namespace ktune;

TEST_CASE("every family matches its CPU reference on the GPU", "[gpu]") {
  test::skip_without_gpu();
  auto runner = tuner::make_gpu_runner();
  for (const auto* family : templates::all_families()) {
    for (const auto& problem : family->problem_classes()) {
      for (const auto& config : test::sampled_configs(*family, problem, runner->device(), 8)) {
        tuner::RunOptions options;
        options.seed = 7;
        const auto r = runner->run(*family, config, problem, options);
        INFO(family->name() << " " << problem.key() << " " << config.str() << ": " << r.failure);
        CHECK(r.ok);
      }
    }
  }
}
