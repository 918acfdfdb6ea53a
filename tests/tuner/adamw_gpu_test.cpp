// On a GPU: every AdamW variant matches the CPU reference (fresh random
// inputs, outputs poisoned first). Skipped without a device.
#include <catch2/catch.hpp>

#include "support.hpp"
#include "tuner/gpu_runner.hpp"

using namespace ktune;
using namespace ktune::tuner;

TEST_CASE("every AdamW variant matches the CPU reference on the GPU", "[gpu][adamw]") {
  test::skip_without_gpu();
  auto runner = make_gpu_runner();
  for (const char* name : {"adamw", "adamw_single", "adamw_eager"}) {
    const auto& family = templates::find_family(name);
    for (const auto& problem : family.problem_classes()) {
      for (std::uint64_t i = 0; i < family.space().size(); ++i) {
        const Config c = family.space().at(i);
        if (!family.is_valid(c, problem, runner->device())) continue;
        RunOptions o;
        o.seed = 100 + i;
        const RunResult r = runner->run(family, c, problem, o);
        INFO(name << " " << c.str() << " " << problem.key() << ": " << r.failure);
        CHECK(r.ok);
      }
    }
  }
}

TEST_CASE("the timing harness measures a real kernel with a small spread", "[gpu][timing]") {
  test::skip_without_gpu();
  auto runner = make_gpu_runner();
  const auto& family = templates::find_family("adamw");
  const Problem p{"f32", {{"tensors", 8}, {"numel", 1 << 20}}};
  RunOptions o;
  o.time = true;
  const RunResult r = runner->run(family, family.default_config(p), p, o);
  REQUIRE(r.ok);
  REQUIRE(r.timing);
  CHECK(r.timing->median_ms > 0);
  CHECK(r.timing->p80_ms >= r.timing->p20_ms);
  CHECK(r.timing->repetitions >= o.min_repetitions);
}
