// The grid runner of the emulation backend: blocks over a thread pool, one
// fiber per CUDA thread, barriers and warp collectives as fiber switches.
#include "tuner/emu/grid.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "base/error.hpp"
#include "tuner/emu/block.hpp"

namespace ktune::tuner::emu {
namespace {

using detail::BlockRun;
using detail::Exchange;
using detail::Slot;
using detail::State;

BlockRun& block_of(kt::emu::Thread* t) { return *static_cast<BlockRun*>(t->runner); }
Slot& slot_of(kt::emu::Thread* t) { return block_of(t).slots[t->linear]; }

/// Suspends the running fiber until the scheduler resumes it.
void yield(Slot& s) { s.scheduler = std::move(s.scheduler).resume(); }

/// Records `message` for the block and abandons it (jumps to its scheduler).
[[noreturn]] void fail_block(BlockRun& b, kt::emu::Thread* t, const std::string& message) {
  b.error = message + " (" + detail::where(b, t) + ")";
  siglongjmp(b.env, 2);
}

void release_barrier(BlockRun& b) {
  b.arrived = 0;
  ++b.generation;
  b.counts[b.generation & 1] = 0;
  for (auto& s : b.slots)
    if (s.state == State::kBarrier) s.state = State::kReady;
  b.stats.thread_barriers += b.n;
}

void host_sync_threads(kt::emu::Thread* t) {
  BlockRun& b = block_of(t);
  if (++b.arrived == b.n) {
    release_barrier(b);
    return;
  }
  Slot& s = slot_of(t);
  s.state = State::kBarrier;
  yield(s);
}

int host_sync_threads_count(kt::emu::Thread* t, int predicate) {
  BlockRun& b = block_of(t);
  const unsigned generation = b.generation;
  b.counts[generation & 1] += predicate != 0;
  host_sync_threads(t);
  return b.counts[generation & 1];
}

void host_named_barrier(kt::emu::Thread* t, unsigned id, unsigned count, int wait) {
  BlockRun& b = block_of(t);
  if (id < 1 || id > kt::emu::kNamedBarriers)
    fail_block(b, t, fmt::format("named barrier {}: ids are 1..{} (0 is __syncthreads')", id, kt::emu::kNamedBarriers));
  if (count == 0 || count % 32 != 0 || count > (b.n + 31) / 32 * 32)
    fail_block(b, t,
               fmt::format("named barrier {} of {} threads: the count is whole warps, at most the block's {} "
                           "threads",
                           id, count, b.n));
  detail::NamedBarrier& bar = b.named[id];
  if (bar.arrived != 0 && bar.count != count)
    fail_block(b, t, fmt::format("threads arrive at named barrier {} with counts {} and {}", id, bar.count, count));
  bar.count = count;
  if (++bar.arrived == count) {
    bar.arrived = 0;
    for (auto& s : b.slots)
      if (s.state == State::kNamed && s.named == id) s.state = State::kReady;
    return;
  }
  if (!wait) return;
  Slot& s = slot_of(t);
  s.state = State::kNamed;
  s.named = id;
  yield(s);
}

Exchange* new_exchange(BlockRun& b) {
  if (b.free_exchanges.empty()) {
    b.exchanges.push_back(std::make_unique<Exchange>());
    b.free_exchanges.push_back(b.exchanges.back().get());
  }
  Exchange* e = b.free_exchanges.back();
  b.free_exchanges.pop_back();
  return e;
}

/// Completes `e`, a collective of warp `w` whose every lane of its mask that has not exited has arrived: its
/// waiting lanes (all but `running`, which goes on by itself) run again.
void complete_exchange(BlockRun& b, unsigned w, Exchange* e, unsigned running) {
  auto& open = b.warps[w].open;
  open.erase(std::find(open.begin(), open.end(), e));
  for (unsigned l = 0; l < 32; ++l)
    if ((e->arrived >> l & 1u) && l != running) b.slots[w * 32 + l].state = State::kReady;
}

/// Thread `t` has exited: the collectives of its warp that waited only for it (CUDA's *_sync collectives wait
/// for the lanes of their mask that have not exited) complete.
void lane_exited(BlockRun& b, const kt::emu::Thread& t) {
  auto& warp = b.warps[t.warp];
  warp.exited |= 1u << t.lane;
  for (std::size_t k = 0; k < warp.open.size();) {
    Exchange* e = warp.open[k];
    if (e->arrived == (e->mask & ~warp.exited))
      complete_exchange(b, t.warp, e, kt::emu::kWarpSize);
    else
      ++k;
  }
}

unsigned host_warp_exchange(kt::emu::Thread* t, unsigned mask, const void* mine, unsigned bytes, void* all) {
  BlockRun& b = block_of(t);
  auto& warp = b.warps[t->warp];
  const unsigned bit = 1u << t->lane;
  if (!(mask & bit))
    fail_block(b, t,
               fmt::format("lane {} called a warp collective with mask 0x{:08x}, which excludes it", t->lane, mask));
  if (bytes > kt::emu::kMaxExchangeBytes) fail_block(b, t, "warp collective payload over 64 bytes");
  Exchange* e = nullptr;
  // Lanes may run ahead into a later collective with another mask (independent
  // thread scheduling), so only an open collective with the same mask is this
  // lane's; lanes whose masks never agree end in a deadlock report.
  for (Exchange* open : warp.open) {
    if (open->mask != mask) continue;
    if (open->bytes != bytes)
      fail_block(b, t,
                 fmt::format("lanes of warp {} are in different warp collectives with mask 0x{:08x} "
                             "(payloads of {} and {} bytes)",
                             t->warp, mask, open->bytes, bytes));
    e = open;
    break;
  }
  if (!e) {
    e = new_exchange(b);
    e->mask = mask;
    e->arrived = 0;
    e->readers = 0;
    e->bytes = bytes;
    warp.open.push_back(e);
  }
  std::memcpy(e->data[t->lane], mine, bytes);
  e->arrived |= bit;
  // Lanes of the mask that have exited, or that the block's last warp lacks, are not waited for.
  if (e->arrived == (mask & ~warp.exited)) {
    complete_exchange(b, t->warp, e, t->lane);
  } else {
    Slot& s = slot_of(t);
    s.state = State::kWarp;
    s.exchange = e;
    yield(s);
  }
  const unsigned taking_part = e->arrived;
  auto* out = static_cast<unsigned char*>(all);
  for (unsigned l = 0; l < 32; ++l) {
    if (taking_part >> l & 1u)
      std::memcpy(out + l * bytes, e->data[l], bytes);
    else
      std::memset(out + l * bytes, 0xff, bytes);
  }
  b.stats.warp_collectives += 1;
  if (++e->readers == static_cast<unsigned>(std::popcount(taking_part))) b.free_exchanges.push_back(e);
  return taking_part;
}

void host_fail(kt::emu::Thread* t, const char* message) { fail_block(block_of(t), t, message); }

constexpr kt::emu::Host kHost{host_sync_threads, host_sync_threads_count, host_warp_exchange, host_named_barrier,
                              host_fail};

/// "0-31, 64, 96-127" for the sorted thread ids in `ids`.
std::string ranges(const std::vector<unsigned>& ids) {
  std::string s;
  for (std::size_t i = 0; i < ids.size();) {
    std::size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (!s.empty()) s += ", ";
    s += ids[i] == ids[j] ? fmt::format("{}", ids[i]) : fmt::format("{}-{}", ids[i], ids[j]);
    i = j + 1;
  }
  return s;
}

/// Why no fiber of the block can continue.
std::string describe_deadlock(const BlockRun& b) {
  std::vector<unsigned> at_barrier, done, at_warp, at_named;
  std::string warp_detail;
  for (unsigned i = 0; i < b.n; ++i) {
    const Slot& s = b.slots[i];
    if (s.state == State::kBarrier) at_barrier.push_back(i);
    if (s.state == State::kDone) done.push_back(i);
    if (s.state == State::kNamed) at_named.push_back(i);
    if (s.state == State::kWarp) {
      at_warp.push_back(i);
      if (warp_detail.empty()) {
        const unsigned missing = s.exchange->mask & ~s.exchange->arrived & ~b.warps[s.thread.warp].exited;
        std::vector<unsigned> lanes;
        for (unsigned l = 0; l < 32; ++l)
          if (missing >> l & 1u) lanes.push_back(s.thread.warp * 32 + l);
        warp_detail = fmt::format(" (mask 0x{:08x}; threads {} never joined it)", s.exchange->mask, ranges(lanes));
      }
    }
  }
  const char* linear = b.slots[0].thread.block_dim.y * b.slots[0].thread.block_dim.z > 1 ? " (linear thread indices)"
                                                                                         : "";
  // Some threads returned before a __syncthreads the rest wait at: no hang for certain on a GPU, but undefined.
  if (at_warp.empty() && at_named.empty() && !at_barrier.empty() && !done.empty())
    return fmt::format("a __syncthreads that threads {} never reach (they have exited) in {}: threads {} wait at "
                       "it{}; CUDA leaves a barrier not every thread of the block reaches undefined (a GPU may hang, "
                       "or go on unsynchronised): guard the work, not the barrier",
                       ranges(done), detail::block_where(b), ranges(at_barrier), linear);
  std::string s = "deadlock in " + detail::block_where(b) + ": ";
  std::vector<std::string> parts;
  if (!at_barrier.empty()) parts.push_back(fmt::format("threads {} wait at __syncthreads", ranges(at_barrier)));
  if (!at_named.empty()) {
    const unsigned id = b.slots[at_named.front()].named;
    parts.push_back(fmt::format("threads {} wait at named barriers (the first at {}, {} of its {} threads arrived)",
                                ranges(at_named), id, b.named[id].arrived, b.named[id].count));
  }
  if (!at_warp.empty())
    parts.push_back(fmt::format("threads {} wait in a warp collective{}", ranges(at_warp), warp_detail));
  if (!done.empty()) parts.push_back(fmt::format("threads {} have exited", ranges(done)));
  for (std::size_t i = 0; i < parts.size(); ++i) s += (i ? "; " : "") + parts[i];
  s += linear;
  return s + "; a barrier must be reached by every thread of the block (a named barrier by its count), a collective "
             "by every lane of its mask";
}

/// Why the block, all its threads done, still has arrivals at a named
/// barrier (an arrive no sync completed), or "".
std::string unfinished_named_barrier(const BlockRun& b) {
  for (unsigned id = 1; id <= kt::emu::kNamedBarriers; ++id)
    if (const detail::NamedBarrier& bar = b.named[id]; bar.arrived != 0)
      return fmt::format("{} ended with {} of the {} threads of named barrier {} arrived: every bar.arrive needs "
                         "the bar.sync of the threads it counts with",
                         detail::block_where(b), bar.arrived, bar.count, id);
  return {};
}

/// Drops every fiber of an abandoned block without running it again; their
/// stacks go back to the pool with StackPool::reset.
void forget_fibers(BlockRun& b) {
  for (auto& f : b.fibers) new (&f) detail::ctx::fiber();
  for (auto& s : b.slots) new (&s.scheduler) detail::ctx::fiber();
}

// The block's first warp and lane orders; kShuffle draws them, each later
// sweep's and which threads' cp.async copies land early from the seed and
// the block's linear index, whichever worker runs the block.
void start_order(BlockRun& b, std::uint64_t block, std::mt19937_64& rng) {
  b.warp_order.resize(b.warps.size());
  std::iota(b.warp_order.begin(), b.warp_order.end(), 0u);
  std::iota(b.lane_order.begin(), b.lane_order.end(), 0u);
  switch (b.schedule.order) {
    case env::EmuSchedule::Order::kInOrder:
      break;
    case env::EmuSchedule::Order::kReverse:
      std::reverse(b.warp_order.begin(), b.warp_order.end());
      std::reverse(b.lane_order.begin(), b.lane_order.end());
      break;
    case env::EmuSchedule::Order::kShuffle:
      rng.seed(b.schedule.seed * 0x9E3779B97F4A7C15ull + block);
      std::shuffle(b.warp_order.begin(), b.warp_order.end(), rng);
      std::shuffle(b.lane_order.begin(), b.lane_order.end(), rng);
      break;
  }
}

// Resumes thread i once it is ready; whether it was.
bool resume(BlockRun& b, unsigned i) {
  if (b.slots[i].state != State::kReady) return false;
  *b.current_slot = &b.slots[i].thread;
  b.resumes.fetch_add(1, std::memory_order_relaxed);
  b.in_fiber = true;
  b.fibers[i] = std::move(b.fibers[i]).resume();
  b.in_fiber = false;
  return true;
}

// Warp collectives a warp passes in one sweep at most, out of order: past
// them the next warp runs, so one that spins on a collective waiting for
// another warp's write (`while (!flag) __syncwarp();`) lets that warp run,
// as a GPU's warp scheduler does.
constexpr unsigned kMaxRounds = 1024;

// One sweep; whether any thread ran. In order, every ready thread is resumed
// once, thread 0 first, so the warps advance together, one warp collective
// at a time. Otherwise warp by warp in the warp order, each warp's ready
// lanes resumed (in the lane order) until none is, or for kMaxRounds warp
// collectives: a warp runs on to its next block barrier (or that many
// collectives) before the next warp starts, as far ahead of the others as a
// GPU may let it drift.
bool sweep(BlockRun& b) {
  bool progressed = false;
  if (b.schedule.order == env::EmuSchedule::Order::kInOrder) {
    for (unsigned i = 0; i < b.n; ++i) progressed |= resume(b, i);
    return progressed;
  }
  for (const unsigned w : b.warp_order)
    for (unsigned round = 0; round < kMaxRounds; ++round) {
      bool again = false;
      for (const unsigned lane : b.lane_order)
        if (const unsigned i = w * 32 + lane; i < b.n) again |= resume(b, i);
      progressed |= again;
      if (!again) break;
    }
  return progressed;
}

void run_block(BlockRun& b, kt::emu::U3 block_idx) {
  const GridLaunch& l = *b.launch;
  const auto entry = l.module->kernels.at(static_cast<std::size_t>(l.kernel));
  std::mt19937_64 rng;
  start_order(b, block_idx.x + std::uint64_t{l.grid[0]} * (block_idx.y + std::uint64_t{l.grid[1]} * block_idx.z), rng);
  for (unsigned i = 0; i < b.n; ++i) {
    Slot& s = b.slots[i];
    kt::emu::Thread& t = s.thread;
    t.thread_idx = {i % l.block[0], i / l.block[0] % l.block[1], i / (l.block[0] * l.block[1])};
    t.block_idx = block_idx;
    t.block_dim = {l.block[0], l.block[1], l.block[2]};
    t.grid_dim = {l.grid[0], l.grid[1], l.grid[2]};
    t.linear = i;
    t.lane = i % 32;
    t.warp = i / 32;
    t.host = &kHost;
    t.runner = &b;
    t.dynamic_smem = b.dynamic_smem_data;
    t.dynamic_smem_bytes = l.dynamic_smem;
    t.static_smem = b.static_smem;
    t.static_smem_bytes = b.static_smem ? l.module->tls_bytes : 0;
    t.async.reset();
    t.wgmma.reset();
    t.bulk.reset();
    t.async_early = b.schedule.order == env::EmuSchedule::Order::kReverse ||
                    (b.schedule.order == env::EmuSchedule::Order::kShuffle && (rng() & 1));
    s.state = State::kReady;
    s.exchange = nullptr;
    b.fibers[i] = detail::ctx::fiber(std::allocator_arg, detail::PoolAllocator{b.stacks},
                                     [&b, &s, entry](detail::ctx::fiber&& scheduler) {
                                       s.scheduler = std::move(scheduler);
                                       entry(b.launch->args);
                                       // A GPU's registers are gone with the thread: D never lands.
                                       if (s.thread.wgmma.count != 0)
                                         fail_block(b, &s.thread,
                                                    "a thread ended with a wgmma in flight (no wgmma_wait covers it)");
                                       // Its shared memory is gone with the block: wait for the reads first.
                                       if (s.thread.bulk.count != 0)
                                         fail_block(b, &s.thread,
                                                    "a thread ended with a bulk reduction in flight (no "
                                                    "bulk_wait_read covers it)");
                                       lane_exited(b, s.thread);
                                       s.state = State::kDone;
                                       ++b.done;
                                       return std::move(s.scheduler);
                                     });
  }
  for (auto& w : b.warps) {
    w.open.clear();
    w.exited = ~w.valid_lanes;  // lanes the last warp lacks never exist: as exited ones
  }
  b.free_exchanges.clear();
  for (auto& e : b.exchanges) b.free_exchanges.push_back(e.get());
  b.done = 0;
  b.arrived = 0;
  b.generation = 0;
  b.counts[0] = b.counts[1] = 0;
  b.named.fill({});
  // NaN bytes, as a GPU leaves no value behind: a read before a write shows,
  // in dynamic shared memory and in the static __shared__ variables (the
  // module's thread-local block on this worker; the running-thread slot in
  // it is set again before each resume).
  if (b.dynamic_smem_data) std::memset(b.dynamic_smem_data, 0xff, l.dynamic_smem);
  if (b.static_smem) std::memset(b.static_smem, 0xff, l.module->tls_bytes);

  detail::current_block() = &b;
  if (sigsetjmp(b.env, 1) == 0) {
    for (;;) {
      const bool progressed = sweep(b);
      if (b.done == b.n) {
        b.error = unfinished_named_barrier(b);
        break;
      }
      if (b.schedule.order == env::EmuSchedule::Order::kShuffle) {
        std::shuffle(b.warp_order.begin(), b.warp_order.end(), rng);
        std::shuffle(b.lane_order.begin(), b.lane_order.end(), rng);
      }
      if (!progressed) {
        b.error = describe_deadlock(b);
        forget_fibers(b);
        break;
      }
    }
  } else {
    b.in_fiber = false;
    if (b.error.empty()) {
      b.error = b.fault_text;
      // "... thread (3,0,0) at rendered.cu:42: ...": the line of `ktune render`'s text that faulted.
      if (const std::string line = source_line(b.fault_pc); !line.empty()) {
        const std::size_t thread = b.error.find("thread (");
        const std::size_t end = thread == std::string::npos ? thread : b.error.find(')', thread);
        if (end != std::string::npos)
          b.error.insert(end + 1, " at " + line);
        else
          b.error += " (at " + line + ")";
      }
    }
    b.fault_pc = nullptr;  // a later failure by a hook (a bounds check, __trap) has none
    forget_fibers(b);
  }
  detail::current_block() = nullptr;
  *b.current_slot = nullptr;
  b.stacks->reset();
}

// The k-th block to start, as a linear block index: in order; reversed; or
// shuffled, through k -> (a k + c) mod total with a coprime to total, a and
// c drawn from the seed (the workers still run blocks side by side).
class BlockOrder {
 public:
  BlockOrder(const env::EmuSchedule& schedule, long long total) : total_(total), order_(schedule.order) {
    if (order_ != env::EmuSchedule::Order::kShuffle) return;
    std::mt19937_64 rng(schedule.seed * 0xD1B54A32D192ED03ull + static_cast<std::uint64_t>(total));
    std::uniform_int_distribution<long long> pick(0, total - 1);
    do a_ = pick(rng) | 1;
    while (std::gcd(a_, total_) != 1);
    c_ = pick(rng);
  }
  long long operator()(long long k) const {
    switch (order_) {
      case env::EmuSchedule::Order::kInOrder: return k;
      case env::EmuSchedule::Order::kReverse: return total_ - 1 - k;
      case env::EmuSchedule::Order::kShuffle: break;
    }
    return static_cast<long long>((static_cast<unsigned __int128>(a_) * static_cast<unsigned __int128>(k) +
                                   static_cast<unsigned __int128>(c_)) %
                                  static_cast<unsigned __int128>(total_));
  }

 private:
  long long total_;
  env::EmuSchedule::Order order_;
  long long a_ = 1, c_ = 0;
};

detail::StackPool& worker_stacks() {
  static thread_local detail::StackPool pool;
  return pool;
}

/// While alive, watches the blocks the workers run: a worker inside one
/// thread of its block (a fiber) that has resumed none for `seconds` is sent
/// kHangSignal, which ends the block with a report naming the thread.
class HangWatchdog {
 public:
  HangWatchdog(unsigned seconds, std::size_t workers) : seconds_(seconds), runs_(workers, nullptr) {
    if (seconds_ > 0) thread_ = std::thread([this] { watch(); });
  }
  ~HangWatchdog() {
    {
      std::lock_guard lock(mutex_);
      finished_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  HangWatchdog(const HangWatchdog&) = delete;
  HangWatchdog& operator=(const HangWatchdog&) = delete;

  /// Worker `j` runs `b` from now on (null: no more).
  void watch_run(std::size_t j, detail::BlockRun* b) {
    std::lock_guard lock(mutex_);
    runs_[j] = b;
  }

 private:
  void watch() {
    using Clock = std::chrono::steady_clock;
    std::vector<std::uint64_t> seen(runs_.size(), 0);
    std::vector<Clock::time_point> since(runs_.size(), Clock::now());
    std::unique_lock lock(mutex_);
    while (!wake_.wait_for(lock, std::chrono::milliseconds(200), [this] { return finished_; })) {
      const auto now = Clock::now();
      for (std::size_t j = 0; j < runs_.size(); ++j) {
        detail::BlockRun* b = runs_[j];  // alive while registered: a worker deregisters under the lock
        if (!b) continue;
        if (const std::uint64_t resumes = b->resumes.load(); !b->in_fiber || resumes != seen[j]) {
          seen[j] = resumes;
          since[j] = now;
          b->hang_signalled = false;
        } else if (now - since[j] >= std::chrono::seconds(seconds_) && !b->hang_signalled.exchange(true)) {
          detail::send_hang_signal(b->worker);
        }
      }
    }
  }

  unsigned seconds_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool finished_ = false;
  std::vector<detail::BlockRun*> runs_;
  std::thread thread_;
};

}  // namespace

GridExecutor::GridExecutor(unsigned workers, env::EmuSchedule schedule, unsigned hang_seconds)
    : pool_(std::make_unique<ThreadPool>(workers ? workers : std::max(1u, std::thread::hardware_concurrency()))),
      schedule_(schedule),
      hang_seconds_(hang_seconds) {}

GridExecutor::~GridExecutor() = default;

GridStats GridExecutor::run(const GridLaunch& launch) {
  KTUNE_REQUIRE(launch.module && launch.kernel >= 0 &&
                    static_cast<std::size_t>(launch.kernel) < launch.module->kernels.size(),
                "emulation: launch names kernel " + std::to_string(launch.kernel) + ", which the module lacks");
  const unsigned long long threads =
      static_cast<unsigned long long>(launch.block[0]) * launch.block[1] * launch.block[2];
  KTUNE_REQUIRE(threads >= 1 && threads <= 1024,
                fmt::format("emulation: block of {} threads; a block has 1..1024 threads", threads));
  const long long total = static_cast<long long>(launch.grid[0]) * launch.grid[1] * launch.grid[2];
  KTUNE_REQUIRE(total >= 1, "emulation: empty grid");

  detail::FaultHandlerScope handler;
  std::atomic<long long> next{0};
  const BlockOrder block_at(schedule_, total);
  std::atomic<bool> abort{false};
  std::mutex mutex;
  std::string error;
  GridStats stats;
  const unsigned jobs = static_cast<unsigned>(std::min<long long>(pool_->size(), total));
  HangWatchdog watchdog(hang_seconds_, jobs);
  std::vector<std::future<void>> futures;
  for (unsigned j = 0; j < jobs; ++j) {
    futures.push_back(pool_->submit([&, j] {
      detail::ensure_signal_stack();
      std::unique_ptr<GuardedBuffer> smem;
      BlockRun b;
      b.worker = ::pthread_self();
      b.hang_seconds = hang_seconds_;
      watchdog.watch_run(j, &b);
      struct Unwatch {  // before b goes, however the worker ends
        HangWatchdog& watchdog;
        unsigned j;
        ~Unwatch() { watchdog.watch_run(j, nullptr); }
      } unwatch{watchdog, j};
      b.launch = &launch;
      b.stacks = &worker_stacks();
      b.current_slot = launch.module->current_slot();  // which also gives this worker its thread-local block
      b.static_smem = launch.module->thread_block();
      if (launch.dynamic_smem) {
        smem = std::make_unique<GuardedBuffer>("dynamic shared memory", launch.dynamic_smem);
        b.dynamic_smem = &smem->region();
        b.dynamic_smem_data = reinterpret_cast<unsigned char*>(smem->data());
      }
      b.n = static_cast<unsigned>(threads);
      b.schedule = schedule_;
      b.slots.resize(b.n);
      b.fibers.resize(b.n);
      b.warps.resize((b.n + 31) / 32);
      for (unsigned w = 0; w < b.warps.size(); ++w) {
        const unsigned lanes = std::min(32u, b.n - 32 * w);
        b.warps[w].valid_lanes = lanes == 32 ? ~0u : (1u << lanes) - 1;
      }
      for (;;) {
        const long long k = next++;
        if (k >= total || abort) break;
        const long long i = block_at(k);
        const auto gx = static_cast<long long>(launch.grid[0]), gy = static_cast<long long>(launch.grid[1]);
        const kt::emu::U3 block{static_cast<unsigned>(i % gx), static_cast<unsigned>(i / gx % gy),
                                static_cast<unsigned>(i / (gx * gy))};
        run_block(b, block);
        ++b.stats.blocks;
        // A write a little before dynamic shared memory lands in its page's canary, not on a guard page.
        if (const std::string bad = smem && b.error.empty() ? smem->check_canary() : ""; !bad.empty()) {
          b.error = fmt::format("{} by kernel {}, block ({},{},{})", bad,
                                launch.module->kernel_names.at(static_cast<std::size_t>(launch.kernel)), block.x,
                                block.y, block.z);
          smem->rearm_canary();
        }
        if (!b.error.empty()) {
          abort = true;
          std::lock_guard lock(mutex);
          if (error.empty()) error = b.error;
          break;
        }
      }
      std::lock_guard lock(mutex);
      stats.blocks += b.stats.blocks;
      stats.thread_barriers += b.stats.thread_barriers;
      stats.warp_collectives += b.stats.warp_collectives;
    }));
  }
  for (auto& f : futures) f.get();
  if (!error.empty()) throw_error(ErrorKind::kCheckFailed, "emulation: " + error);
  stats.threads = stats.blocks * static_cast<long long>(threads);
  return stats;
}

}  // namespace ktune::tuner::emu
