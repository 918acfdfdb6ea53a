#include "cli/stop_signals.hpp"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <ctime>

namespace ktune::cli {

namespace {

volatile std::sig_atomic_t caught_signal = 0;
std::atomic<std::int64_t> first_signal_ns{0};  // lock-free: safe in a handler
static_assert(std::atomic<std::int64_t>::is_always_lock_free);
std::atomic<const char*> saying_text{nullptr};
std::atomic<const char*> again_text{nullptr};
// Lock files to remove before the process ends at once: copied in when registered, read by the handler.
constexpr int kMaxLocks = 8;
char lock_paths[kMaxLocks][4096];
std::atomic<int> lock_count{0};

/// Removes the registered lock files (unlink is async-signal-safe), then the signal's default action.
void end_at_once(int signal) {
  for (int i = 0; i < lock_count.load(); ++i) ::unlink(lock_paths[i]);
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}
// Signals this soon after the first are the same stop request delivered
// again: GNU timeout, for one, signals its child and then its process group.
constexpr std::int64_t kSameRequestNs = 1'000'000'000;

extern "C" void on_stop_signal(int signal) {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);  // async-signal-safe
  const std::int64_t ns = static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
  if (caught_signal == 0) {
    caught_signal = signal;
    first_signal_ns = ns;
    if (const char* say = saying_text.load()) {
      [[maybe_unused]] const auto written = ::write(STDERR_FILENO, say, std::strlen(say));
    }
    return;
  }
  // Each write to a closed pipe raises SIGPIPE again (this handler's own, to a stderr that is the pipe, too):
  // the same request, however late.
  if (signal == SIGPIPE || ns - first_signal_ns < kSameRequestNs) return;
  // A second request: the signal's default action, once this handler returns.
  if (const char* say = again_text.load()) {
    [[maybe_unused]] const auto written = ::write(STDERR_FILENO, say, std::strlen(say));
  }
  end_at_once(signal);
}

// Nothing to stop after: the line, then the signal's default action.
extern "C" void on_signal_at_once(int signal) {
  if (const char* say = saying_text.load()) {
    [[maybe_unused]] const auto written = ::write(STDERR_FILENO, say, std::strlen(say));
  }
  end_at_once(signal);
}

}  // namespace

StopSignals::StopSignals(bool active, const char* saying, const char* at_once, const char* again)
    : active_(active) {
  if (!active_ && !at_once) return;
  installed_ = true;
  caught_signal = 0;
  saying_text = active_ ? saying : at_once;
  again_text = active_ ? again : nullptr;
  struct sigaction action{};
  action.sa_handler = active_ ? on_stop_signal : on_signal_at_once;
  action.sa_flags = SA_RESTART;  // system calls under way go on
  sigemptyset(&action.sa_mask);
  // One handler at a time: the first signal's time is set before a second one reads it.
  for (const int signal : kSignals) sigaddset(&action.sa_mask, signal);
  for (std::size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &action, &old_[i]);
  // Only to say what a signal's default action ends: one the process ignores (a background job's SIGINT, nohup's
  // SIGHUP) stays so.
  if (!active_)
    for (std::size_t i = 0; i < kSignals.size(); ++i)
      if (old_[i].sa_handler == SIG_IGN) ::sigaction(kSignals[i], &old_[i], nullptr);
}

void StopSignals::set_again(const char* again) { again_text = again; }

void StopSignals::remove_at_once(const std::string& lock) {
  const int i = lock_count.load();
  if (i >= kMaxLocks || lock.size() >= sizeof(lock_paths[0])) return;  // left behind, harmless: the next run takes it
  std::memcpy(lock_paths[i], lock.c_str(), lock.size() + 1);
  lock_count = i + 1;
}

StopSignals::~StopSignals() {
  if (!installed_) return;
  for (std::size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
}

int StopSignals::caught() const { return active_ ? static_cast<int>(caught_signal) : 0; }

std::string StopSignals::name(int signal) {
  return signal == SIGINT ? "SIGINT" : signal == SIGHUP ? "SIGHUP" : signal == SIGPIPE ? "SIGPIPE" : "SIGTERM";
}

}  // namespace ktune::cli
