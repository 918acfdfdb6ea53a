// The one timing harness (STYLE.md habit 10): CUDA events around the
// launches only, warm-up first, L2 flushed before every repetition, median
// with p20/p80, repeated until the measured time is long enough.
#pragma once
#include <functional>

#include "tuner/cuda/device.hpp"
#include "tuner/run/runner.hpp"

namespace ktune::tuner {

/// The bytes of the buffer that flushes an L2 of `l2_bytes` (twice its size, at least 1 MiB).
std::size_t flush_bytes(long long l2_bytes);

/// Times `launch` (which enqueues the work on the given stream). Compile and
/// module load never happen inside. `flush` (flush_bytes of the device's L2)
/// is written before every repetition; `reset`, where given, enqueues work
/// before each warm-up and repetition (before the flush), outside the events.
Measurement time_on_gpu(const std::function<void(CUstream)>& launch, const RunOptions& options, Stream& stream,
                        const DeviceBuffer& flush, const std::string& what,
                        const std::function<void(CUstream)>& reset = {});

/// Device-to-device copy bandwidth (read + write bytes per second, GB/s),
/// measured with `bytes`-sized buffers; needs a current context (a Context,
/// or a GPU runner, alive on this thread).
double measure_copy_bandwidth_gbs(std::size_t bytes = std::size_t(1) << 30);

}  // namespace ktune::tuner
