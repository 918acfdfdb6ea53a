// The mixed-precision accumulation benchmark on a GPU: the device's
// conversions and adds give the host reference's sums, bit for bit.
// Skipped without a device.
#include <catch2/catch.hpp>

#include "tuner/bench/precision_check.hpp"
#include "support.hpp"

namespace tuner_bench_precision_bench_gpu_test {

using namespace ktune;

TEST_CASE("bench precision on the GPU: each sum is the reference's, and the seeds' sums are PyTorch's",
          "[bench][gpu]") {
  test::skip_without_gpu();
  auto backend = tuner::exec::make_cuda_backend();
  test::check_seed_sums(test::check_precision(*backend, 1000, 0.01));
  for (const auto& [count, value] : {std::pair<std::int64_t, double>{3000, -0.7}, {20000, 0.3}, {1, 1.0 / 3}})
    test::check_precision(*backend, count, value);
}

}  // namespace tuner_bench_precision_bench_gpu_test
