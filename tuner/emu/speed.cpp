#include "tuner/emu/speed.hpp"

#include <chrono>
#include <limits>

#include "base/error.hpp"
#include "templates/embedded.hpp"
#include "tuner/emu/grid.hpp"
#include "tuner/emu/memory.hpp"
#include "tuner/emu/module.hpp"

namespace ktune::tuner {
namespace {

const char* kProbes = R"(
__global__ void emu_barriers(float* out, int n) {
  float acc = static_cast<float>(threadIdx.x);
  for (int i = 0; i < n; ++i) {
    acc += 1.0f;
    __syncthreads();
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
__global__ void emu_shuffles(float* out, int n) {
  float acc = static_cast<float>(threadIdx.x);
  for (int i = 0; i < n; ++i) acc += __shfl_xor_sync(0xffffffffu, acc, 1 + i % 16) * 0.5f;
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
)";

}  // namespace

EmuSpeed measure_emu_speed(unsigned block_threads, unsigned blocks, unsigned barriers, unsigned workers) {
  KTUNE_REQUIRE(block_threads >= 32 && block_threads <= 1024 && block_threads % 32 == 0,
                "emulation speed: threads per block must be a multiple of 32 in 32..1024");
  KTUNE_REQUIRE(blocks >= 1 && barriers >= 1 && barriers <= std::numeric_limits<int>::max(),
                "emulation speed: blocks and barriers must be positive, barriers an int (the kernels' loop count)");
  templates::Rendered r;
  r.source = "// emulation speed probes\n" + templates::expand_includes("common/kt.cuh") + kProbes;
  r.kernels = {"emu_barriers", "emu_shuffles"};
  const auto module = emu::load_module(r);
  emu::GridExecutor executor(workers);
  emu::GuardedBuffer out("out", static_cast<std::size_t>(blocks) * block_threads * sizeof(float));
  float* out_ptr = reinterpret_cast<float*>(out.data());
  int n = static_cast<int>(barriers);
  void* args[] = {&out_ptr, &n};

  EmuSpeed s;
  s.block_threads = block_threads;
  s.blocks = blocks;
  s.barriers = barriers;
  s.workers = executor.workers();
  emu::GridLaunch l;
  l.module = module.get();
  l.grid = {blocks, 1, 1};
  l.block = {block_threads, 1, 1};
  l.args = args;
  l.regions = {&out.region()};
  for (int kernel = 0; kernel < 2; ++kernel) {
    l.kernel = kernel;
    const auto t0 = std::chrono::steady_clock::now();
    const auto stats = executor.run(l);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (kernel == 0) {
      s.barrier_seconds = seconds;
      s.thread_barriers_per_second = static_cast<double>(stats.thread_barriers) / seconds;
    } else {
      s.shuffle_seconds = seconds;
      s.lane_shuffles_per_second = static_cast<double>(stats.warp_collectives) / seconds;
    }
  }
  return s;
}

}  // namespace ktune::tuner
