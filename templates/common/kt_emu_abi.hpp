// The contract between an emulated kernel module (a shared object built from
// rendered source + kt_emu.hpp) and the emulation runner (tuner/emu_*.cpp).
// Both sides include this header; it holds plain structs, one inline queue
// template and function pointers, so the module needs no symbol from the runner.
//
// Per emulated CUDA thread the runner owns one kt::emu::Thread and tells the
// module which one is running through the slot returned by the module's
// kt_emu_current_slot(). Block barriers and warp collectives call back into
// the runner (Host), which switches fibers.
#pragma once
#include <cstddef>
#include <cstdint>

namespace kt::emu {

/// Bumped whenever a struct below changes; the runner refuses other modules.
inline constexpr int kAbiVersion = 7;
inline constexpr int kWarpSize = 32;
/// Largest per-lane payload of one warp exchange (an mma operand set is 40 bytes).
inline constexpr unsigned kMaxExchangeBytes = 64;
/// Named barriers a block has besides __syncthreads' (bar.sync 0): ids 1..kNamedBarriers.
inline constexpr unsigned kNamedBarriers = 15;
/// Outstanding cp.async copies per thread before the oldest group is forced
/// to complete (hardware may complete a copy at any time before the wait).
inline constexpr unsigned kMaxAsyncCopies = 64;
/// wgmma.mma_async instructions in flight per thread before the oldest
/// group is forced to complete (as kMaxAsyncCopies).
inline constexpr unsigned kMaxWgmma = 32;
/// Bulk reductions in flight per thread before the oldest group is forced
/// to complete (as kMaxAsyncCopies).
inline constexpr unsigned kMaxBulk = 16;

/// CUDA's uint3 (threadIdx, blockIdx) and the value of dim3 (blockDim, gridDim).
struct U3 {
  unsigned x, y, z;
};

struct Thread;

/// Services the runner provides to kernel code. Calls that cannot succeed
/// (a deadlock, a mask mismatch) do not return: the runner abandons the block.
struct Host {
  /// __syncthreads: returns once every thread of the block has arrived.
  void (*sync_threads)(Thread* self);
  /// __syncthreads_count: as sync_threads; returns how many threads passed a non-zero predicate.
  int (*sync_threads_count)(Thread* self, int predicate);
  /// A warp collective over the lanes in `mask`: each lane contributes `bytes`
  /// (<= kMaxExchangeBytes) from `mine` and receives every lane's contribution
  /// in `all` (32 * bytes; lanes outside the mask read as 0xff bytes). As
  /// CUDA's *_sync collectives, it waits for the lanes of `mask` that have not
  /// exited: a lane that has exited, or that the block's last warp lacks, takes
  /// no part (its bytes read as 0xff too). Returns the lanes that took part.
  unsigned (*warp_exchange)(Thread* self, unsigned mask, const void* mine, unsigned bytes, void* all);
  /// bar.sync (wait 1) or bar.arrive (wait 0) on named barrier `id`
  /// (1..kNamedBarriers) of `count` threads (a multiple of 32, at most the
  /// block's): returns once `count` threads have arrived since it last
  /// completed, or at once for an arrive.
  void (*named_barrier)(Thread* self, unsigned id, unsigned count, int wait);
  /// Ends the block with an error (`__trap`, misuse of an intrinsic); never returns.
  void (*fail)(Thread* self, const char* message);
};

/// One pending cp.async: `bytes` are written at `dst`, the first `src_bytes`
/// of them read from `src`, the rest zero-filled.
struct AsyncCopy {
  void* dst;
  const void* src;
  unsigned bytes;
  unsigned src_bytes;
  unsigned group;
};

/// One wgmma.mma_async in flight: D (n / 2 of this thread's registers) =
/// A * B (+ D), A and B read through shared-memory descriptors when it
/// completes, or A from the registers of this thread's quad (lanes 4g..4g+3
/// of its warp, a[4 * i + r] lane 4g + i's register r) taken when issued.
struct Wgmma {
  float* d;
  unsigned long long desc_a, desc_b;
  unsigned a[16];
  unsigned n;
  unsigned group;
  unsigned char bf16, accumulate, trans_a, trans_b, a_in_registers;
};

/// One cp.reduce.async.bulk .add.f32 in flight: `count` floats of shared
/// memory at `src` added to global memory at `dst` when it completes.
struct BulkReduce {
  float* dst;
  const float* src;
  unsigned count;
  unsigned group;
};

/// The operations of one kind in flight on one thread, oldest first, in
/// the groups of PTX's commit_group / wait_group (Op has a `group` member).
/// The runner resets it when a thread starts and reads `count` when it ends;
/// the module issues, commits and waits. `run` completes one operation.
template <class Op, unsigned N>
struct InFlight {
  unsigned group;  ///< id of the open (not yet committed) group
  unsigned count;
  Op ops[N];

  void reset() { group = count = 0; }
  /// Completes the operations of the groups before `before`, oldest first.
  template <class Run>
  void complete(unsigned before, Run&& run) {
    unsigned kept = 0;
    for (unsigned i = 0; i < count; ++i) {
      if (ops[i].group < before)
        run(ops[i]);
      else
        ops[kept++] = ops[i];
    }
    count = kept;
  }
  /// Adds `op` to the open group, or completes it at once when `early`. A
  /// full queue first completes its oldest group (a GPU may complete any
  /// operation before its wait), then, if that group is the open one, all.
  template <class Run>
  void issue(Op op, bool early, Run&& run) {
    op.group = group;
    if (early) return run(op);
    if (count == N) complete(ops[0].group + 1, run);
    if (count == N) complete(group + 1, run);
    ops[count++] = op;
  }
  /// commit_group: closes the open group.
  void commit() { ++group; }
  /// wait_group `pending`: all but the `pending` most recent committed groups are complete.
  template <class Run>
  void wait(unsigned pending, Run&& run) {
    if (group >= pending) complete(group - pending, run);
  }
};

/// The state of one emulated CUDA thread.
struct Thread {
  U3 thread_idx;
  U3 block_idx;
  U3 block_dim;
  U3 grid_dim;
  unsigned linear;  ///< x + y*bx + z*bx*by within the block
  unsigned lane;    ///< linear % 32
  unsigned warp;    ///< linear / 32
  const Host* host;
  void* runner;  ///< the runner's block state; opaque to the module
  unsigned char* dynamic_smem;
  std::size_t dynamic_smem_bytes;
  unsigned char* static_smem;  ///< the static __shared__ variables: the module's thread-local block on this worker
  std::size_t static_smem_bytes;
  /// 1: this thread's cp.async copies, wgmma instructions and bulk
  /// reductions complete when issued; 0: at their covering wait (a GPU
  /// completes them at any time in between).
  unsigned char async_early;
  InFlight<AsyncCopy, kMaxAsyncCopies> async;
  InFlight<Wgmma, kMaxWgmma> wgmma;
  InFlight<BulkReduce, kMaxBulk> bulk;
};

/// Signatures of the module's exported functions (extern "C").
using AbiVersionFn = int (*)();                 ///< kt_emu_abi_version
using CurrentSlotFn = Thread** (*)();           ///< kt_emu_current_slot: this OS thread's slot
using KernelEntryFn = void (*)(void** args);    ///< kt_emu_kernel_<i>: args as cuLaunchKernel's kernelParams

}  // namespace kt::emu
