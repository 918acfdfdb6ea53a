// Per-launch times (RunOptions::per_launch): a plan of several launches also
// has each launch timed alone, named by its kernel, through the worker
// process's JSON as well; a one-launch plan has none.
#include <catch2/catch.hpp>

#include "support.hpp"
#include "templates/attention/attention.hpp"
#include "tuner/run/emu_runner.hpp"
#include "tuner/run/runner.hpp"

namespace tuner_run_launch_timings_emu_test {

using namespace ktune;
using namespace ktune::tuner;

TEST_CASE("a plan of several launches is timed whole and launch by launch, each named by its kernel",
          "[emu][runner]") {
  const auto& bwd = templates::attention::backward_family();
  const templates::Problem p{"bf16", {{"batch", 1}, {"heads", 2}, {"seq", 40}, {"head_dim", 16}, {"causal", 1}}};
  auto runner = make_emu_runner({1, "sm_90"});
  RunOptions o = test::time_once();
  o.time = true;
  o.per_launch = true;
  Config c = bwd.default_config(p);
  for (const std::int64_t atomic : {1, 0}) {
    INFO("dq_atomic " << atomic);
    c.set("dq_atomic", atomic);
    const RunResult r = runner->run(bwd, c, p, o);
    REQUIRE(r.ok);
    REQUIRE(r.timing);
    // D first; then dK and dV, and dQ by atomics converted, or by a second pass.
    REQUIRE(r.launch_timings.size() == 3);
    CHECK_THAT(r.launch_timings[0].first, Catch::Contains("attention_bwd_preprocess"));
    CHECK_THAT(r.launch_timings[1].first, Catch::Contains("attention_bwd_dkdv"));
    CHECK_THAT(r.launch_timings[2].first, Catch::Contains(atomic ? "attention_bwd_dq_convert" : "attention_bwd_dq<"));
    for (const auto& [kernel, m] : r.launch_timings) {
      INFO(kernel);
      CHECK(m.median_ms > 0);
      CHECK(m.method.find("1 launch alone") != std::string::npos);
    }
    const RunResult back = run_result_from_json(to_json(r));
    REQUIRE(back.launch_timings.size() == 3);
    CHECK(back.launch_timings[1].first == r.launch_timings[1].first);
    CHECK(back.launch_timings[1].second.median_ms == r.launch_timings[1].second.median_ms);
  }
  CHECK(run_options_from_json(to_json(o)).per_launch);
  // Without per_launch, or with one launch, the whole plan's time alone.
  o.per_launch = false;
  CHECK(runner->run(bwd, c, p, o).launch_timings.empty());
  o.per_launch = true;
  const auto& fwd = templates::attention::forward_family();
  const RunResult one = runner->run(fwd, fwd.default_config(p), p, o);
  CHECK(one.ok);
  CHECK(one.launch_timings.empty());
}

}  // namespace tuner_run_launch_timings_emu_test
