// A runner whose work happens in a worker process, so that a variant which
// crashes (a sticky CUDA error, a segfault, an abort) or hangs never ends the
// session: the parent marks it failed with the reason, kills and restarts the
// worker, and goes on. The inner runner (GPU or emulation) is created inside
// the worker, after fork, so the parent never touches the device.
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
