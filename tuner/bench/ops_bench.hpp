// The ops benchmark: for each (family, problem) of a model's step, the
// family's eager chain (templates/eager/eager.hpp: one primitive launch per
// op, as PyTorch eager) against its tuned fused kernel, on one execution
// backend. Both are validated against the family's CPU reference before they
// are timed; GB/s counts the fused family's minimum traffic for both, and the
// floor is that traffic at the measured copy bandwidth plus one measured
// empty launch.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache/tuned_cache.hpp"
#include "tuner/bench/completion.hpp"
#include "templates/family.hpp"
#include "tuner/exec/backend.hpp"

namespace ktune::tuner {

/// One op of one model shape.
struct OpsBenchCase {
  std::string model;  ///< e.g. "xl"
  std::int64_t context = 0;
  std::string family;  ///< a family with an eager decomposition
  templates::Problem problem;
};

struct OpsBenchRow {
  OpsBenchCase op;
  double bytes = 0;  ///< the fused family's minimum DRAM traffic
  double fused_ms = 0, fused_p20_ms = 0, fused_p80_ms = 0;
  /// Every repetition of the two measurements, in order: the statistics can be checked from them.
  std::vector<double> fused_samples_ms, eager_samples_ms;
  int fused_launches = 0;  ///< the fused family's launches (the floor counts one)
  double eager_ms = 0;
  int eager_launches = 0;
  double floor_ms = 0;  ///< bytes / copy bandwidth + one empty launch
  double fused_gbs = 0, eager_gbs = 0;
  double fused_fraction_of_copy = 0, eager_fraction_of_copy = 0;
  std::string fused_config, fused_source;
};

/// One op over every shape it was measured at, against the families' targets: at
/// least kLargeTarget of the copy bandwidth where the fused kernel moves
/// kLargeBytes or more, within kFloorTarget of its floor below that.
struct OpsBenchSummary {
  static constexpr double kLargeBytes = 64e6;  ///< 64 MB, as the table's MB column (10^6 bytes)
  static constexpr double kLargeTarget = 0.85;
  static constexpr double kFloorTarget = 1.5;
  std::string family;
  int shapes = 0;
  int met = 0;  ///< shapes at their target
  double floor_ratio_min = 0, floor_ratio_max = 0;  ///< fused / floor
  int large_shapes = 0;  ///< shapes of kLargeBytes or more
  double large_copy_min = 0, large_copy_max = 0;  ///< fused fraction of copy over them
  double speedup_min = 0, speedup_max = 0;  ///< eager / fused
  /// Whether `r` is at its target.
  static bool meets(const OpsBenchRow& r);
};

struct OpsBenchReport {
  std::string device;
  int driver_version = 0;  ///< the CUDA driver API version (cuDriverGetVersion); 0 on the emulation
  std::string date;
  double copy_bandwidth_gbs = 0;
  double empty_launch_ms = 0;
  bool programmatic = false;  ///< both forms' kernels launched with programmatic dependent launch
  std::string method;
  std::vector<OpsBenchRow> rows;
  std::vector<std::string> warnings;  ///< stale tuned entries the lookups skipped
  Completion completion;  ///< the rows planned and measured, and the signal that stopped the run, if one did
  /// One entry per op, in the order of their first rows.
  std::vector<OpsBenchSummary> summary() const;
  /// The summary as a markdown table with its target (left out of markdown()
  /// without a copy bandwidth, as on the emulation).
  std::string summary_markdown() const;
  std::string markdown() const;
  nlohmann::json to_json() const;
};

/// Runs every case on `backend`: fused with the tuned config (from `tuned`,
/// or the family default when null), then the eager chain. Throws
/// Error(kCheckFailed) when either output does not match the reference.
OpsBenchReport run_ops_bench(exec::Backend& backend, const std::vector<OpsBenchCase>& cases,
                             const cache::TunedCache* tuned, double copy_bandwidth_gbs, const RunOptions& options,
                             const std::function<void(const OpsBenchRow&)>& progress = {},
                             const std::function<bool()>& should_stop = {});

}  // namespace ktune::tuner
