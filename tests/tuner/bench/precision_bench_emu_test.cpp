// The mixed-precision accumulation benchmark on the emulation: every sum is
// the host reference's, bit for bit, and the seeds' sums come out as
// PyTorch printed them.
#include <catch2/catch.hpp>

#include "base/error.hpp"
#include "tuner/bench/precision_check.hpp"
#include "support.hpp"

namespace tuner_bench_precision_bench_emu_test {

using namespace ktune;

TEST_CASE("bench precision: each sum is the reference's, and the seeds' sums are PyTorch's", "[bench][emu]") {
  auto backend = tuner::exec::make_emu_backend({1, "sm_80"});
  test::check_seed_sums(test::check_precision(*backend, 1000, 0.01));
  // A negative addend, sums past where bf16 and then f16 stop growing, and a single addition.
  for (const auto& [count, value] : {std::pair<std::int64_t, double>{3000, -0.7}, {20000, 0.3}, {1, 1.0 / 3}})
    test::check_precision(*backend, count, value);
  // bf16 stops where half its spacing passes the addend: at 4 for 0.01 (spacing 2^-5 from 4 on).
  const auto report = tuner::run_precision_bench(*backend, 1000, 0.01);
  CHECK(report.rows[3].sum == 4.0);
}

TEST_CASE("bench precision refuses a count or value it cannot run", "[bench][emu]") {
  auto backend = tuner::exec::make_emu_backend({1, "sm_80"});
  CHECK_THROWS_AS(tuner::run_precision_bench(*backend, 0, 0.01), Error);
  CHECK_THROWS_AS(tuner::run_precision_bench(*backend, 10, 1e39), Error);
}

}  // namespace tuner_bench_precision_bench_emu_test
