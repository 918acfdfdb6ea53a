// Internal to the emulation backend: the state of one block being run (its
// threads' fibers, barrier and warp-exchange bookkeeping), the per-worker
// fiber stack pool, and the fault handler that turns a SIGSEGV inside kernel
// code into an error for the running block.
#pragma once
#include <pthread.h>
#include <signal.h>

#include <array>
#include <atomic>
#include <csetjmp>
#include <cstdint>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <boost/context/fiber.hpp>
#include <boost/context/stack_context.hpp>

#include "base/env.hpp"
#include "templates/common/kt_emu_abi.hpp"
#include "tuner/emu/grid.hpp"

namespace ktune::tuner::emu::detail {

namespace ctx = boost::context;

/// Usable stack per emulated thread; a guard page below catches overflows.
inline constexpr std::size_t kStackSize = 256 * 1024;

/// Fiber stacks of one worker thread, reused from block to block.
class StackPool {
 public:
  StackPool() = default;
  ~StackPool();
  StackPool(const StackPool&) = delete;
  StackPool& operator=(const StackPool&) = delete;

  ctx::stack_context allocate();
  void deallocate(ctx::stack_context& sc);
  /// Every stack is free again (after a block, including abandoned fibers').
  void reset() { free_ = all_; }
  /// Whether `address` is in the guard page of one of the stacks.
  bool in_guard(const void* address) const;

 private:
  std::vector<std::byte*> all_;  // mapping starts: [guard page][kStackSize]
  std::vector<std::byte*> free_;
};

/// Boost.Context stack allocator over a StackPool.
struct PoolAllocator {
  StackPool* pool;
  ctx::stack_context allocate() { return pool->allocate(); }
  void deallocate(ctx::stack_context& sc) { pool->deallocate(sc); }
};

enum class State : unsigned char { kReady, kBarrier, kNamed, kWarp, kDone };

/// One warp collective in progress: lanes of `mask` deposit, then read.
struct Exchange {
  unsigned mask = 0;
  unsigned arrived = 0;
  unsigned readers = 0;
  unsigned bytes = 0;
  unsigned char data[kt::emu::kWarpSize][kt::emu::kMaxExchangeBytes];
};

struct Slot {
  kt::emu::Thread thread;
  State state = State::kReady;
  Exchange* exchange = nullptr;  // while kWarp
  unsigned named = 0;            // while kNamed: the barrier's id
  ctx::fiber scheduler;          // continuation back to the block's scheduler
};

/// One named barrier (bar.sync / bar.arrive id, count): arrivals since it last completed.
struct NamedBarrier {
  unsigned arrived = 0;
  unsigned count = 0;  // of the arrivals so far
};

struct WarpState {
  unsigned valid_lanes = 0;     // lanes that exist in this block
  unsigned exited = 0;          // lanes that have exited, or do not exist: no collective waits for them
  std::vector<Exchange*> open;  // collectives still waiting for lanes
};

/// One worker's state for running the blocks of one launch.
struct BlockRun {
  const GridLaunch* launch = nullptr;
  StackPool* stacks = nullptr;
  kt::emu::Thread** current_slot = nullptr;
  const Region* dynamic_smem = nullptr;
  unsigned char* dynamic_smem_data = nullptr;
  unsigned char* static_smem = nullptr;  // the module's thread-local block on this worker (Module::thread_block)

  unsigned n = 0;  // threads per block
  env::EmuSchedule schedule;
  std::vector<unsigned> warp_order;  // the order a sweep runs the warps in (not kInOrder)
  std::array<unsigned, kt::emu::kWarpSize> lane_order{};  // and each warp's lanes
  std::vector<Slot> slots;
  std::vector<ctx::fiber> fibers;
  std::vector<WarpState> warps;
  std::vector<std::unique_ptr<Exchange>> exchanges;
  std::vector<Exchange*> free_exchanges;

  unsigned done = 0;
  unsigned arrived = 0;
  unsigned generation = 0;
  int counts[2] = {0, 0};
  std::array<NamedBarrier, kt::emu::kNamedBarriers + 1> named{};  // by id; 0 unused (__syncthreads)
  GridStats stats;

  sigjmp_buf env;
  std::atomic<bool> in_fiber{false};
  // The hang watchdog's view (GridExecutor::run): the fibers resumed so far,
  // the worker to signal, the limit, and whether it was signalled since the
  // last resume.
  std::atomic<std::uint64_t> resumes{0};
  pthread_t worker{};
  unsigned hang_seconds = 0;
  std::atomic<bool> hang_signalled{false};
  std::string error;      // set when the block failed
  char fault_text[1024];  // written by the signal handler
  const void* fault_pc = nullptr;  // the faulting instruction, where the signal handler can tell
};

/// What the hang watchdog sends a worker whose thread ran too long; the
/// fault handler ends that block with a report naming the thread. Any other
/// SIGUSR2 goes to the program's disposition.
constexpr int kHangSignal = SIGUSR2;

/// Sends kHangSignal to `worker`, marked as the watchdog's (sigqueue'd with a
/// value only ktune uses), so the fault handler tells it from anyone else's.
void send_hang_signal(pthread_t worker);

/// The block the calling worker thread is running (null outside a block).
BlockRun*& current_block();

/// Installs the fault handler for the lifetime of the object (reference counted).
class FaultHandlerScope {
 public:
  FaultHandlerScope();
  ~FaultHandlerScope();
  FaultHandlerScope(const FaultHandlerScope&) = delete;
  FaultHandlerScope& operator=(const FaultHandlerScope&) = delete;
};

/// Gives the calling worker thread an alternate signal stack (once).
void ensure_signal_stack();

/// "kernel K, block (x,y,z)" for the block `b` runs.
std::string block_where(const BlockRun& b);
/// "kernel K, block (x,y,z), thread (x,y,z)" for the running thread of `b`.
std::string where(const BlockRun& b, const kt::emu::Thread* t);

}  // namespace ktune::tuner::emu::detail
