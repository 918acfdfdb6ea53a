// The emulation runner (STYLE.md habit 8): the runner of tuner/runner.hpp
// over the emulation backend, so a family's variant runs on the CPU and is
// checked against the CPU reference. Timing, when asked for, is host wall
// time, labelled as such.
#pragma once
#include <memory>
#include <string>

#include "tuner/exec/backend.hpp"
#include "tuner/run/runner.hpp"

namespace ktune::tuner {

class EmuRunner final : public Runner {
 public:
  explicit EmuRunner(EmuOptions options = {});
  ~EmuRunner() override;

  std::string backend() const override;
  const DeviceLimits& device() const override;
  /// Renders, compiles (host compiler, cached), runs the plan's launches on
  /// guarded buffers (outputs poisoned with NaN first), validates. Failures
  /// are results: "invalid: ...", "compile: ...", "pruned: ..." (the fit
  /// check), "emulation: ..." (deadlock, out-of-bounds access, trap),
  /// "validation: ...". A malformed problem or config throws
  /// Error(kInvalidInput), as everywhere.
  RunResult run(const Family& family, const Config& config, const Problem& problem,
                const RunOptions& options) override;

 private:
  std::unique_ptr<Runner> inner_;
};

/// An emulation runner with default options.
std::unique_ptr<Runner> make_emu_runner(EmuOptions options = {});

/// The emulation's runner with `emu` where `emulated`, else CUDA device
/// `ordinal`'s (make_gpu_runner: Error kNoDevice without one).
std::unique_ptr<Runner> make_runner(bool emulated, EmuOptions emu = {}, int ordinal = 0);

}  // namespace ktune::tuner
