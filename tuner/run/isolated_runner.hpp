// A runner whose work happens in a worker process, so that a variant which
// crashes (a segfault, an abort), hangs or ends in a CUDA error (which may be
// sticky: an illegal address leaves the context unusable) never ends the
// session nor fails the variants after it: the parent marks it failed with
// the reason, the worker is ended and restarted, and the session goes on.
// The inner runner (GPU or emulation) is created inside the worker, after
// fork, so the parent never touches the device. The parent must not have
// touched it before either: a process forked after CUDA was initialised
// cannot use the device, and the worker's start then fails saying so.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "tuner/run/runner.hpp"

namespace ktune::tuner {

struct IsolationOptions {
  double timeout_s = 120;  ///< per evaluation (compile included); past it the worker is killed
  /// Families the worker resolves by name besides the registered ones (tests
  /// plant failing families this way). They must outlive the runner.
  std::vector<const Family*> extra_families;
};

/// Wraps the runner `make_inner` creates (called in each worker process).
/// Throws what `make_inner` throws (e.g. Error(kNoDevice)) when the first
/// worker cannot start.
std::unique_ptr<Runner> make_isolated_runner(std::function<std::unique_ptr<Runner>()> make_inner,
                                             IsolationOptions options = {});

}  // namespace ktune::tuner
