// Fiber stacks and fault handling of the emulation backend: a SIGSEGV, SIGBUS
// or SIGFPE raised by kernel code on an emulation worker, and the hang
// watchdog's SIGUSR2, become an error for the running block (the handler jumps
// back to the block's scheduler); every other signal of these, a fault outside
// kernel code or one sent by a process, goes to the disposition that was
// installed before, as it would have without ktune.
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>

#include <fmt/format.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#include "base/error.hpp"
#include "tuner/emu/block.hpp"

namespace ktune::tuner::emu::detail {
namespace {

std::size_t page_size() {
  static const std::size_t p = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return p;
}

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGFPE, kHangSignal};
// A fault this close to a buffer is taken to be through its own pointer (an index off by a few vectors).
constexpr long long kNearbyBytes = 256;
constexpr int kSignalCount = sizeof kSignals / sizeof kSignals[0];
struct sigaction g_previous[kSignalCount];
std::mutex g_mutex;
int g_installs = 0;

// What the watchdog's signals carry (send_hang_signal): this address, which nothing outside ktune sends.
char g_hang_token;

int signal_index(int sig) {
  for (int i = 0; i < kSignalCount; ++i)
    if (kSignals[i] == sig) return i;
  return 0;
}

/// Describes the fault at `address` into b.fault_text, without allocating.
void describe_fault(BlockRun& b, int sig, const void* address, bool write) {
  const kt::emu::Thread* t = *b.current_slot;
  char at[256];
  std::snprintf(at, sizeof at, "in kernel %s, block (%u,%u,%u), thread (%u,%u,%u)",
                b.launch->module->kernel_names.at(static_cast<std::size_t>(b.launch->kernel)).c_str(),
                t ? t->block_idx.x : 0, t ? t->block_idx.y : 0, t ? t->block_idx.z : 0, t ? t->thread_idx.x : 0,
                t ? t->thread_idx.y : 0, t ? t->thread_idx.z : 0);
  if (sig == SIGFPE) {
    std::snprintf(b.fault_text, sizeof b.fault_text, "arithmetic exception (integer division by zero?) %s", at);
    return;
  }
  const char* access = write ? "write" : "read";
  auto describe_region = [&](const Region& r) {
    const long long offset = r.offset_of(address);
    const auto size = static_cast<long long>(r.size);
    // Far from it, the buffer is only the nearest one: the kernel may have gone there through another's pointer.
    const long long past = offset < 0 ? -offset : offset - size + 1;
    const char* nearest = past > kNearbyBytes ? " (the nearest buffer to the address: the pointer used may be "
                                                "another buffer's)"
                                              : "";
    if (offset < 0)
      std::snprintf(b.fault_text, sizeof b.fault_text,
                    "out-of-bounds %s %s: %lld byte%s before the start of %s (%lld bytes)%s", access, at, -offset,
                    -offset == 1 ? "" : "s", r.name.c_str(), size, nearest);
    else if (offset == size)
      std::snprintf(b.fault_text, sizeof b.fault_text,
                    "out-of-bounds %s %s: byte offset %lld of %s (%lld bytes), the first byte past its end", access,
                    at, offset, r.name.c_str(), size);
    else
      std::snprintf(b.fault_text, sizeof b.fault_text,
                    "out-of-bounds %s %s: byte offset %lld of %s (%lld bytes), %lld byte%s after its last%s",
                    access, at, offset, r.name.c_str(), size, past, past == 1 ? "" : "s", nearest);
  };
  for (const Region* r : b.launch->regions)
    if (r->contains(address)) return describe_region(*r);
  if (b.dynamic_smem && b.dynamic_smem->contains(address)) return describe_region(*b.dynamic_smem);
  if (b.stacks->in_guard(address)) {
    std::snprintf(b.fault_text, sizeof b.fault_text,
                  "stack overflow %s: an emulated thread may use at most %zu KiB of stack", at, kStackSize / 1024);
    return;
  }
  if (reinterpret_cast<std::uintptr_t>(address) < 65536) {  // through a null pointer, at a small offset
    std::snprintf(b.fault_text, sizeof b.fault_text, "invalid %s of address %p %s: a null pointer%s", access, address,
                  at,
                  b.launch->dynamic_smem == 0
                      ? " (if it came from kt::dynamic_shared(): the launch has no dynamic shared memory, so that "
                        "is null; a kernel spec's shared_bytes sizes it)"
                      : "");
    return;
  }
  std::snprintf(b.fault_text, sizeof b.fault_text, "invalid %s of address %p %s (outside every buffer of the launch)",
                access, address, at);
}

/// Describes the thread the watchdog found running too long into b.fault_text, without allocating.
void describe_hang(BlockRun& b) {
  const kt::emu::Thread* t = *b.current_slot;
  std::snprintf(b.fault_text, sizeof b.fault_text,
                "hang in kernel %s, block (%u,%u,%u), thread (%u,%u,%u): it ran %u s without reaching a barrier, a "
                "warp collective or its end (a loop that never ends, or one that waits for what another thread "
                "writes, which the emulation runs only once this one waits at a barrier or collective; "
                "KTUNE_EMU_HANG_SECONDS sets the limit)",
                b.launch->module->kernel_names.at(static_cast<std::size_t>(b.launch->kernel)).c_str(),
                t ? t->block_idx.x : 0, t ? t->block_idx.y : 0, t ? t->block_idx.z : 0, t ? t->thread_idx.x : 0,
                t ? t->thread_idx.y : 0, t ? t->thread_idx.z : 0, b.hang_seconds);
}

/// Whether `info` is the hang watchdog's: queued by this process with its token.
bool from_watchdog(const siginfo_t* info) {
  return info->si_code == SI_QUEUE && info->si_pid == ::getpid() && info->si_value.sival_ptr == &g_hang_token;
}

/// Hands `sig` to the disposition on_fault replaced, as if ktune had not been there.
void forward(int sig, siginfo_t* info, void* context) {
  const struct sigaction& previous = g_previous[signal_index(sig)];
  const bool sent = info->si_code <= 0;  // by a process (kill, sigqueue, raise), not raised by the system for a fault
  if (previous.sa_flags & SA_SIGINFO) {
    previous.sa_sigaction(sig, info, context);
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(sig);
  } else if (previous.sa_handler == SIG_IGN && sent) {
    // ignored, as before (a fault ignored would recur on return forever: the default action, below)
  } else {
    // Returning re-executes a faulting access, which now ends the process as usual; a signal sent is sent again.
    ::signal(sig, SIG_DFL);
    if (sent) ::raise(sig);
  }
}

void on_fault(int sig, siginfo_t* info, void* context) {
  // ktune's own: a fault the system raised (not one a process sent), and SIGUSR2 only from the watchdog.
  const bool own = sig == kHangSignal ? from_watchdog(info) : info->si_code > 0;
  BlockRun* b = current_block();
  if (own && b && b->in_fiber) {
    bool write = false;
    b->fault_pc = nullptr;
#if defined(__x86_64__)
    const auto& registers = static_cast<ucontext_t*>(context)->uc_mcontext;
    write = (registers.gregs[REG_ERR] & 2) != 0;
    b->fault_pc = reinterpret_cast<const void*>(registers.gregs[REG_RIP]);
#elif defined(__aarch64__)
    b->fault_pc = reinterpret_cast<const void*>(static_cast<ucontext_t*>(context)->uc_mcontext.pc);
#endif
    if (sig == kHangSignal)
      describe_hang(*b);
    else
      describe_fault(*b, sig, info->si_addr, write);
    siglongjmp(b->env, 1);
  }
  if (own && sig == kHangSignal) return;  // for a thread that reached a barrier meanwhile: nothing to end
  forward(sig, info, context);
}

}  // namespace

namespace {
// Under AddressSanitizer, a stack's shadow is cleared before it is used again or unmapped: a fiber abandoned
// mid-call (a block that failed) leaves its frames' redzones poisoned, where the next fiber's uninstrumented
// kernel frames, or whatever the address is mapped for next (an emulated device buffer), would lie.
void forget_frames([[maybe_unused]] std::byte* stack) {
#if defined(__SANITIZE_ADDRESS__)
  ASAN_UNPOISON_MEMORY_REGION(stack + page_size(), kStackSize);
#endif
}
}  // namespace

StackPool::~StackPool() {
  for (std::byte* m : all_) {
    forget_frames(m);
    ::munmap(m, kStackSize + page_size());
  }
}

ctx::stack_context StackPool::allocate() {
  if (free_.empty()) {
    const std::size_t page = page_size();
    void* m = ::mmap(nullptr, kStackSize + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
    if (m == MAP_FAILED) throw std::bad_alloc();
    ::mprotect(m, page, PROT_NONE);
    all_.push_back(static_cast<std::byte*>(m));
    free_.push_back(static_cast<std::byte*>(m));
  }
  std::byte* m = free_.back();
  free_.pop_back();
  forget_frames(m);
  ctx::stack_context sc;
  sc.size = kStackSize;
  sc.sp = m + page_size() + kStackSize;
  return sc;
}

void StackPool::deallocate(ctx::stack_context& sc) {
  free_.push_back(static_cast<std::byte*>(sc.sp) - kStackSize - page_size());
}

bool StackPool::in_guard(const void* address) const {
  const auto* p = static_cast<const std::byte*>(address);
  for (const std::byte* m : all_)
    if (p >= m && p < m + page_size()) return true;
  return false;
}

BlockRun*& current_block() {
  static thread_local BlockRun* block = nullptr;
  return block;
}

void ensure_signal_stack() {
  struct AltStack {
    std::vector<char> memory = std::vector<char>(64 * 1024);
    AltStack() {
      stack_t ss{};
      ss.ss_sp = memory.data();
      ss.ss_size = memory.size();
      ::sigaltstack(&ss, nullptr);
    }
    ~AltStack() {
      stack_t ss{};
      ss.ss_flags = SS_DISABLE;
      ::sigaltstack(&ss, nullptr);
    }
  };
  static thread_local AltStack stack;
  (void)stack;
}

FaultHandlerScope::FaultHandlerScope() {
  std::lock_guard lock(g_mutex);
  if (g_installs++ > 0) return;
  struct sigaction action {};
  action.sa_sigaction = on_fault;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  for (int i = 0; i < kSignalCount; ++i) ::sigaction(kSignals[i], &action, &g_previous[i]);
}

FaultHandlerScope::~FaultHandlerScope() {
  std::lock_guard lock(g_mutex);
  if (--g_installs > 0) return;
  // Only where on_fault is still the handler: one the program installed meanwhile stays.
  for (int i = 0; i < kSignalCount; ++i) {
    struct sigaction current {};
    if (::sigaction(kSignals[i], nullptr, &current) == 0 && (current.sa_flags & SA_SIGINFO) &&
        current.sa_sigaction == on_fault)
      ::sigaction(kSignals[i], &g_previous[i], nullptr);
  }
}

void send_hang_signal(pthread_t worker) {
  union sigval value {};
  value.sival_ptr = &g_hang_token;
  ::pthread_sigqueue(worker, kHangSignal, value);
}

std::string block_where(const BlockRun& b) {
  const kt::emu::Thread& t0 = b.slots[0].thread;
  return fmt::format("kernel {}, block ({},{},{})",
                     b.launch->module->kernel_names.at(static_cast<std::size_t>(b.launch->kernel)), t0.block_idx.x,
                     t0.block_idx.y, t0.block_idx.z);
}

std::string where(const BlockRun& b, const kt::emu::Thread* t) {
  return fmt::format("{}, thread ({},{},{})", block_where(b), t->thread_idx.x, t->thread_idx.y, t->thread_idx.z);
}

}  // namespace ktune::tuner::emu::detail
