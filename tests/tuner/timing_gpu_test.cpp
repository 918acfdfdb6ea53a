// On a GPU: the timing harness and the copy bandwidth measurement. They time
// the device, so scripts/gpu-check runs this file alone. Skipped without a
// device.
#include <catch2/catch.hpp>

#include "support.hpp"
#include "tuner/cuda/device.hpp"
#include "tuner/cuda/timing.hpp"
#include "tuner/run/gpu_runner.hpp"

namespace tuner_timing_gpu_test {

using namespace ktune;
using namespace ktune::tuner;

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

TEST_CASE("the measured copy bandwidth is plausible", "[gpu][timing]") {
  test::skip_without_gpu();
  Context context;
  const double gbs = measure_copy_bandwidth_gbs(std::size_t(256) << 20);
  // Read plus write bytes: at least a tenth, at most 1.5x of the memory's
  // peak from its clock and bus width.
  CHECK(gbs > 0.1 * context.info().peak_bandwidth_gbs());
  CHECK(gbs < 1.5 * context.info().peak_bandwidth_gbs());
}

}  // namespace tuner_timing_gpu_test
