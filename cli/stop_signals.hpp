// SIGINT, SIGTERM, SIGHUP (a closed terminal or ssh session) and SIGPIPE (the
// reader of the output's pipe gone: `| tee` killed, `| head`) as a request to
// stop once the work under way is done and written (a training step, a
// tuning evaluation), not at once.
#pragma once
#include <signal.h>

#include <array>
#include <string>

namespace ktune::cli {

/// While alive (and `active`), SIGINT, SIGTERM, SIGHUP and SIGPIPE ask the command to stop
/// after the work under way: `caught` says which came, and `saying` (a
/// string literal: the handler writes it as it is) goes to stderr when the
/// first one does. A second one, a second or more after the first, takes
/// its default action; one within a second is the same request delivered
/// twice (GNU timeout signals its child, then its process group). SIGPIPE
/// is never a second request: every write to the closed pipe raises it
/// again while the run finishes its work (such writes fail, and are lost).
class StopSignals {
 public:
  /// Not `active`, `at_once` (a string literal, or null) goes to stderr as
  /// the first signal ends the process by its default action: a run with
  /// nothing to write says that nothing was kept. `again` (a string literal,
  /// or null) goes to stderr as a second request ends an `active` one at
  /// once: what is kept then.
  StopSignals(bool active, const char* saying, const char* at_once = nullptr, const char* again = nullptr);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  /// The signal that came (SIGINT, SIGTERM, SIGHUP or SIGPIPE), else 0.
  int caught() const;
  /// `again` (a string literal) in place of the constructor's, from now on: what a second request keeps
  /// once the work has written something.
  static void set_again(const char* again);
  /// `lock` (a lock file this process holds) is removed as a signal ends the process at once, as its FileLock
  /// removes it on release, instead of staying behind; at most 8 of them.
  static void remove_at_once(const std::string& lock);
  /// "SIGINT", "SIGTERM", "SIGHUP" or "SIGPIPE".
  static std::string name(int signal);

 private:
  static constexpr std::array<int, 4> kSignals = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
  bool active_, installed_ = false;
  std::array<struct sigaction, kSignals.size()> old_{};
};

}  // namespace ktune::cli
