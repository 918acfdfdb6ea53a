// The emulation runner (STYLE.md habit 8): runs a family's variant on the CPU
// through the host emulation backend and checks it against the CPU reference.
// Timing, when asked for, is the host wall time of one run, labelled as such.
#pragma once
#include <memory>
#include <string>

#include "tuner/emu_grid.hpp"
#include "tuner/runner.hpp"

namespace ktune::tuner {

struct EmuOptions {
  unsigned workers = 0;       ///< OS threads running blocks; 0: one per hardware thread
  std::string arch = "sm_80";  ///< whose limits the emulated device reports
};

class EmuRunner final : public Runner {
 public:
  explicit EmuRunner(EmuOptions options = {});

  std::string backend() const override { return "emu"; }
  const DeviceLimits& device() const override { return device_; }
  /// Renders, compiles (host compiler, cached), runs the plan's launches on
  /// guarded buffers (outputs poisoned with NaN first), validates. Failures
  /// are results: "invalid: ...", "compile: ...", "launch: ...",
  /// "emulation: ..." (deadlock, out-of-bounds access, trap), "validation: ...".
  /// A malformed problem or config throws Error(kInvalidInput), as everywhere.
  RunResult run(const Family& family, const Config& config, const Problem& problem,
                const RunOptions& options) override;

 private:
  DeviceLimits device_;
  emu::GridExecutor executor_;
};

/// An emulation runner with default options.
std::unique_ptr<Runner> make_emu_runner(EmuOptions options = {});

}  // namespace ktune::tuner
