#include "tuner/cuda/timing.hpp"

#include <catch2/catch.hpp>

namespace tuner_run_timing_test {

using ktune::tuner::summarize;

TEST_CASE("summaries: median and p20/p80 by linear interpolation", "[timing]") {
  const auto m = summarize({5, 1, 4, 2, 3});
  CHECK(m.median_ms == 3);
  CHECK(m.p20_ms == Approx(1.8));
  CHECK(m.p80_ms == Approx(4.2));
  CHECK(m.repetitions == 5);
  CHECK(summarize({2}).median_ms == 2);
  CHECK(summarize({}).repetitions == 0);
}

}  // namespace tuner_run_timing_test
