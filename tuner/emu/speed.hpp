// How fast the emulation backend runs: thread-barriers and warp collectives
// per second on probe kernels (what `ktune bench emu` reports).
#pragma once

namespace ktune::tuner {

struct EmuSpeed {
  unsigned block_threads = 0;
  unsigned blocks = 0;
  unsigned barriers = 0;  ///< __syncthreads per thread in the barrier probe
  unsigned workers = 0;
  double barrier_seconds = 0;
  double thread_barriers_per_second = 0;  ///< threads released from __syncthreads per second
  double shuffle_seconds = 0;
  double lane_shuffles_per_second = 0;  ///< lanes through a __shfl_xor_sync per second
};

/// Runs a grid of `blocks` x `block_threads` threads doing `barriers`
/// __syncthreads each, then the same grid doing as many warp shuffles, on
/// `workers` OS threads (0: one per hardware thread). Module compilation is
/// not timed.
EmuSpeed measure_emu_speed(unsigned block_threads, unsigned blocks, unsigned barriers, unsigned workers);

}  // namespace ktune::tuner
