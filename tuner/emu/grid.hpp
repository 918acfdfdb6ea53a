// Emulated grid execution: every block runs on one worker thread of a pool,
// every CUDA thread of the block as a Boost.Context fiber. Block barriers and
// warp collectives switch fibers with CUDA's semantics; a barrier or
// collective that can never complete (a deadlock on a GPU), an access outside
// the launch's buffers (guard pages, SIGSEGV), a fiber stack overflow, and
// __trap() end the launch with an error naming the kernel, block and threads.
// The order in which a block's threads run between barriers, and when their
// cp.async copies land, follow an env::EmuSchedule (KTUNE_EMU_SCHEDULE).
#pragma once
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "base/env.hpp"
#include "base/thread_pool.hpp"
#include "tuner/emu/memory.hpp"
#include "tuner/emu/module.hpp"

namespace ktune::tuner::emu {

/// One launch of a kernel of a loaded module.
struct GridLaunch {
  const Module* module = nullptr;
  int kernel = 0;  ///< index into Module::kernels
  std::array<unsigned, 3> grid{1, 1, 1};
  std::array<unsigned, 3> block{1, 1, 1};
  unsigned dynamic_smem = 0;  ///< bytes; accesses past it fault like a buffer overrun
  void** args = nullptr;      ///< cuLaunchKernel-style kernelParams
  std::vector<const Region*> regions;  ///< the buffers the kernel may touch, for fault messages
};

/// What a launch did, for speed measurements.
struct GridStats {
  long long blocks = 0;
  long long threads = 0;
  long long thread_barriers = 0;  ///< threads released from __syncthreads, summed
  long long warp_collectives = 0;  ///< lanes that took part in a warp collective, summed
};

class GridExecutor {
 public:
  /// `workers` OS threads run blocks in parallel; 0 means one per hardware
  /// thread. `schedule`: the order each block's ready threads are resumed in.
  /// `hang_seconds`: how long a thread may run without reaching a barrier, a
  /// warp collective or its end before the launch fails as a hang (0: never).
  explicit GridExecutor(unsigned workers = 0, env::EmuSchedule schedule = env::emu_schedule(),
                        unsigned hang_seconds = env::emu_hang_seconds());
  ~GridExecutor();
  GridExecutor(const GridExecutor&) = delete;
  GridExecutor& operator=(const GridExecutor&) = delete;

  /// Runs every block of `launch`. Throws Error(kCheckFailed) whose message
  /// starts with "emulation: " when the kernel deadlocks, faults or traps;
  /// Error(kInvalidInput) for an impossible launch shape.
  GridStats run(const GridLaunch& launch);

  unsigned workers() const { return pool_->size(); }

 private:
  std::unique_ptr<ThreadPool> pool_;
  env::EmuSchedule schedule_;
  unsigned hang_seconds_;
};

}  // namespace ktune::tuner::emu
