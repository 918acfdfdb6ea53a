// The GPU runner: the runner of tuner/runner.hpp over the CUDA backend —
// compiles a variant with NVRTC for the device, runs its launch plan on a
// workload with poisoned outputs, checks the results against the CPU
// reference, then times it with the harness of tuner/timing.hpp.
#pragma once
#include <memory>

#include "tuner/run/runner.hpp"

namespace ktune::tuner {

/// A runner on device `ordinal`; throws Error(kNoDevice) when there is none.
std::unique_ptr<Runner> make_gpu_runner(int ordinal = 0);

}  // namespace ktune::tuner
