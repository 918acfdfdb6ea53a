// A process that initialised CUDA before it forks the isolated runner's
// worker: the worker cannot use the device, and the runner's start says why
// in words instead of passing on the driver's bare CUDA_ERROR_NOT_INITIALIZED.
// Its own file: the case leaves this process unable to fork usable workers.
// Skipped without a device.
#include <catch2/catch.hpp>

#include "support.hpp"
#include "tuner/cuda/device.hpp"
#include "tuner/cuda/driver.hpp"
#include "tuner/run/gpu_runner.hpp"
#include "tuner/run/isolated_runner.hpp"

namespace tuner_run_isolated_runner_fork_gpu_test {

using namespace ktune;
using namespace ktune::tuner;

TEST_CASE("an isolated GPU runner started after this process used the GPU says why its worker cannot",
          "[gpu][session]") {
  test::skip_without_gpu();
  CHECK_FALSE(Driver::initialised());  // asked in a child process
  Context context;                     // the first GPU work of this process
  CHECK(Driver::initialised());
  CHECK_THROWS_WITH(make_isolated_runner([] { return make_gpu_runner(); }),
                    Catch::Contains("CUDA does not carry over fork()"));
}

}  // namespace tuner_run_isolated_runner_fork_gpu_test
