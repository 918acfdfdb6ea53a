// On a GPU: every registered family matches its CPU reference for each of its
// problem classes, with its default config and a seeded sample of its space
// (fresh random inputs, outputs poisoned first). The GPU twin of
// emu_families_emu_test.cpp; skipped without a device. And every eager
// decomposition, through the CUDA backend, matches its fused family's
// reference on ragged shapes, as the fused kernel does; both again with
// programmatic dependent launch.
#include <catch2/catch.hpp>

#include "support.hpp"
#include "templates/family.hpp"
#include "templates/eager/eager.hpp"
#include "templates/sampled_configs.hpp"
#include "tuner/bench/ops_bench.hpp"
#include "tuner/exec/backend.hpp"
#include "tuner/precompile.hpp"
#include "tuner/run/gpu_runner.hpp"
#include "tuner/run/runner.hpp"

namespace tuner_families_gpu_test {

using namespace ktune;

TEST_CASE("every family matches its CPU reference on the GPU", "[gpu]") {
  test::skip_without_gpu();
  auto runner = tuner::make_gpu_runner();
  std::vector<test::Variant> variants;
  for (const auto* family : templates::all_families())
    for (const auto& problem : family->problem_classes())
      for (auto& config : test::sampled_configs(*family, problem, runner->device(), 8))
        variants.push_back({family, std::move(config), problem});
  test::precompile(variants, runner->device().arch);
  for (const auto& v : variants) {
    tuner::RunOptions options;
    options.seed = 7;
    const auto r = runner->run(*v.family, v.config, v.problem, options);
    INFO(v.family->name() << " " << v.problem.key() << " " << v.config.str() << ": " << r.failure);
    CHECK(r.ok);
  }
}

TEST_CASE("an in-place family is timed on the GPU from its inputs restored before each repetition", "[gpu]") {
  // grad_norm's clip: the device-to-device copies enqueued before each repetition's flush, outside the events.
  test::skip_without_gpu();
  auto runner = tuner::make_gpu_runner();
  const auto& f = templates::find_family("grad_norm");
  const templates::Problem p{"f32", {{"tensors", 3}, {"numel", 1 << 20}, {"in_place", 1}}};
  tuner::RunOptions options;
  options.time = true;
  const auto r = runner->run(f, f.default_config(p), p, options);
  INFO(r.failure);
  REQUIRE(r.ok);
  REQUIRE(r.timing);
  CHECK_THAT(r.timing->method, Catch::Contains("in-place buffers restored before each, untimed") &&
                                   Catch::Contains("CUDA events"));
  CHECK(r.timing->median_ms > 0);
  // Checked again after the timing: the restores left the buffers whole.
  options.time = false;
  CHECK(runner->run(f, f.default_config(p), p, options).ok);
}

TEST_CASE("every family's default matches its CPU reference with programmatic dependent launch", "[gpu]") {
  // Each launch of a plan (and of the next repetition's) may start while the
  // previous one finishes: a kernel that touched memory before
  // kt::wait_previous_kernel() would race with it.
  test::skip_without_gpu();
  auto backend = tuner::exec::make_cuda_backend();
  backend->set_programmatic(true);
  auto runner = tuner::make_backend_runner(std::move(backend));
  for (const auto* family : templates::all_families())
    for (const auto& problem : family->problem_classes()) {
      const auto config = family->default_config(problem);
      tuner::RunOptions options;
      options.seed = 11;
      const auto r = runner->run(*family, config, problem, options);
      INFO(family->name() << " " << problem.key() << " " << config.str() << ": " << r.failure);
      CHECK(r.ok);
    }
}

TEST_CASE("every eager decomposition matches its fused family's reference on the GPU", "[gpu][eager]") {
  test::skip_without_gpu();
  std::vector<tuner::OpsBenchCase> cases;
  for (const char* dtype : {"f32", "bf16"})
    for (const auto& family : templates::eager::decomposed_families())
      for (const auto& p : templates::find_family(family).problem_classes())  // ragged shapes
        if (p.dtype == dtype) cases.push_back({"ragged", 0, family, p});
  tuner::RunOptions options;
  options.min_repetitions = 1;
  options.min_seconds = 0;
  for (const bool programmatic : {false, true}) {
    INFO("programmatic dependent launch: " << programmatic);
    auto backend = tuner::exec::make_cuda_backend();
    backend->set_programmatic(programmatic);
    // Throws Error(kCheckFailed) naming the op and the output when either path misses its reference.
    const auto report = tuner::run_ops_bench(*backend, cases, nullptr, 0.0, options);
    CHECK(report.rows.size() == cases.size());
  }
}

}  // namespace tuner_families_gpu_test
