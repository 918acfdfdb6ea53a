#include "model/bench_e2e.hpp"

#include <catch2/catch.hpp>

#include "base/error.hpp"

using namespace ktune::model;

TEST_CASE("the e2e benchmark measures the passes it is asked for", "[model][bench]") {
  E2eOptions o;
  o.model = model_config("tiny");
  o.shape = RunShape{2, 16};
  o.warmup = 1;
  o.trials = 2;
  o.threads = 2;
  o.passes = E2ePasses::kStep;
  const E2eResult r = bench_e2e(o);
  CHECK(r.forward.measured);
  CHECK(r.backward.measured);
  CHECK(r.optimizer.measured);
  CHECK(r.forward_backward.mean_ms >= r.forward.mean_ms);
  CHECK(r.allocated_bytes == r.plan.peak_step());
  const auto j = to_json(r);
  CHECK(j.at("num_trials") == 2);
  CHECK(j.at("step").at("mean_ms").get<double>() > 0);
  CHECK_FALSE(r.launches);  // the cpu backend launches nothing
  CHECK(j.at("launches_per_step").is_null());

  o.passes = E2ePasses::kForward;
  const E2eResult f = bench_e2e(o);
  CHECK_FALSE(f.backward.measured);
  CHECK(f.allocated_bytes == f.plan.peak_forward());
  CHECK(to_json(f).at("backward").is_null());

  o.backend = "tpu";
  CHECK_THROWS_WITH(bench_e2e(o), Catch::Contains("backend 'tpu'; accepted: cpu, cuda, emu"));
  o.backend = "cpu";
  o.cache = "tuned.json";
  CHECK_THROWS_WITH(bench_e2e(o), Catch::Contains("the cpu backend has none"));
}
