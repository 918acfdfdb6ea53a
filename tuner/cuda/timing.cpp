#include "tuner/cuda/timing.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "tuner/cuda/check.hpp"

namespace ktune::tuner {

std::size_t flush_bytes(long long l2_bytes) {
  return static_cast<std::size_t>(std::max<long long>(2 * l2_bytes, 1 << 20));
}

Measurement time_on_gpu(const std::function<void(CUstream)>& launch, const RunOptions& options, Stream& stream,
                        const DeviceBuffer& flush, const std::string& what,
                        const std::function<void(CUstream)>& reset) {
  const Driver& d = Driver::get();
  for (int i = 0; i < options.warmup; ++i) {
    if (reset) reset(stream.get());
    launch(stream.get());
  }
  stream.synchronize();
  Event start, stop;
  std::vector<double> samples;
  double total_ms = 0;
  while (static_cast<int>(samples.size()) < options.max_repetitions &&
         (static_cast<int>(samples.size()) < options.min_repetitions || total_ms < options.min_seconds * 1e3)) {
    if (reset) reset(stream.get());
    // Writing a buffer twice the L2 size evicts the inputs: every repetition
    // reads from DRAM, as a training step does.
    KT_CHECK_CU(d.cuMemsetD8Async(static_cast<CUdeviceptr>(flush.address()), static_cast<unsigned char>(samples.size()),
                                  flush.bytes(), stream.get()));
    start.record(stream.get());
    launch(stream.get());
    stop.record(stream.get());
    const double ms = stop.elapsed_since(start);
    samples.push_back(ms);
    total_ms += ms;
  }
  Measurement m = summarize(samples);
  m.method = fmt::format("CUDA events around {}; {} warm-up; L2 flushed ({} MiB written) before each of {} "
                         "repetition{}; median, p20, p80",
                         what, options.warmup, flush.bytes() >> 20, m.repetitions, m.repetitions == 1 ? "" : "s");
  return m;
}

double measure_copy_bandwidth_gbs(std::size_t bytes) {
  const Driver& d = Driver::get();
  DeviceBuffer src(bytes), dst(bytes);
  Stream stream;
  KT_CHECK_CU(d.cuMemsetD8Async(static_cast<CUdeviceptr>(src.address()), 1, bytes, stream.get()));
  RunOptions o;
  o.warmup = 2;
  o.min_repetitions = 10;
  o.min_seconds = 0;
  const auto copy = [&](CUstream s) {
    KT_CHECK_CU(d.cuMemcpyDtoDAsync(static_cast<CUdeviceptr>(dst.address()), static_cast<CUdeviceptr>(src.address()),
                                    bytes, s));
  };
  // Buffers far beyond L2: the flush the harness adds changes nothing here.
  const DeviceBuffer flush(flush_bytes(0));
  const Measurement m = time_on_gpu(copy, o, stream, flush, "one device-to-device copy");
  return 2.0 * static_cast<double>(bytes) / (m.median_ms * 1e-3) / 1e9;
}

}  // namespace ktune::tuner
