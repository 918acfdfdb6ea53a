// The runner interface (STYLE.md habit 8): a GPU runner and an emulation
// runner execute a family's variant on a problem, validate it against the
// CPU reference, and (GPU) time it. Callers never know which one they hold.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "templates/family.hpp"

namespace ktune::tuner {

using templates::DeviceLimits;
using templates::Family;
using templates::Problem;

/// What the timing harness measured, and how.
struct Measurement {
  double median_ms = 0;
  double p20_ms = 0;
  double p80_ms = 0;
  int repetitions = 0;
  std::vector<double> samples_ms;  ///< every repetition, in order (for the winner rule)
  std::string method;  ///< e.g. "cuda events, 3 warm-up, L2 flushed, 1 launch per repetition"
  /// Other processes that used the GPU as it started or ended (GpuMark::others: "pid N (command)"), whose work
  /// slows and spreads these times; empty when it had the GPU to itself (and under emulation).
  std::vector<std::string> shared_with;
};

/// Median / p20 / p80 of samples (a sorted copy), the samples kept.
Measurement summarize(std::vector<double> samples_ms);

struct RunOptions {
  std::uint64_t seed = 1;        ///< workload inputs
  bool validate = true;          ///< compare outputs with the CPU reference first
  bool time = false;             ///< then measure (GPU only)
  int warmup = 3;
  int min_repetitions = 10;
  int max_repetitions = 200;
  double min_seconds = 0.05;     ///< keep repeating until this much kernel time is measured
  /// With time, a plan of several launches also has each launch timed
  /// alone, the same way (its inputs as the whole plan left them).
  bool per_launch = false;
  /// Run-time parameters given values (the rest keep the family's, Family::scalars): the launches take them
  /// and the reference checks at them (Family::make_workload with scalars).
  templates::Scalars scalars = {};
};

/// The outcome of one run. A variant's failure is a result with a reason,
/// never an exception: compile errors, launch errors, wrong results,
/// time-outs. Only bad input (a malformed problem or config) throws.
struct RunResult {
  bool ok = false;
  std::string failure;  ///< "compile: ...", "launch: ...", "validation: ...", "timeout: ..."
  double max_error = 0;  ///< worst relative L2 error over the checked buffers
  std::vector<std::pair<std::string, double>> errors;  ///< per checked buffer
  /// A checked buffer with an absolute tolerance (one whose answer may be near zero, where a relative error says
  /// little): its RMS error and that atol; it passes within either tolerance.
  struct RmsError {
    std::string buffer;
    double rms = 0;
    double atol = 0;
  };
  std::vector<RmsError> rms_errors;
  std::optional<Measurement> timing;
  /// With RunOptions::per_launch: each launch's kernel name and its time alone.
  std::vector<std::pair<std::string, Measurement>> launch_timings;
  double compile_ms = 0;
  /// Why the binary cache did not keep this variant's compile (CompileResult::not_stored); empty when it did.
  std::string not_stored;
  double wall_ms = 0;  ///< the whole evaluation as the session saw it (compile, run, checks, process overhead)
};

class Runner {
 public:
  virtual ~Runner() = default;
  virtual std::string backend() const = 0;  ///< "gpu" | "emu"
  virtual const DeviceLimits& device() const = 0;
  virtual RunResult run(const Family& family, const Config& config, const Problem& problem,
                        const RunOptions& options) = 0;
};

nlohmann::json to_json(const RunOptions& o);
RunOptions run_options_from_json(const nlohmann::json& j);
nlohmann::json to_json(const RunResult& r);
RunResult run_result_from_json(const nlohmann::json& j);

namespace exec {
class Backend;
}
/// The runner over an execution backend (tuner/exec/backend.hpp); the GPU and
/// emulation runners are this over their backends.
std::unique_ptr<Runner> make_backend_runner(std::unique_ptr<exec::Backend> backend);

/// Compares a run's buffers with the workload's expected contents; fills
/// `errors`, `rms_errors`, `max_error`, and `ok`/`failure`. Shared by every runner.
void check_results(const templates::Workload& workload, const std::vector<std::vector<std::byte>>& results,
                   RunResult& result);

}  // namespace ktune::tuner
