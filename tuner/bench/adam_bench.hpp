// The Adam benchmark of seeds 000/001: for N tensors of M elements, the
// step time of ktune's three AdamW forms, in the seeds' column order: a
// fused launch per tensor (adamw_single, where the seeds have
// compiled_single_tensor_adam), the eager chain of primitive launches per
// tensor, as PyTorch eager's single-tensor AdamW (adamw_eager, where the
// seeds have _single_tensor_adam) and the tuned multi-tensor kernel (adamw,
// where they have _fused_adam), with achieved GB/s against the device's
// measured copy bandwidth. JSON keys: per_tensor_fused_ms, eager_chain_ms,
// fused_ms (files written before them: compiled_single_tensor_ms,
// single_tensor_eager_ms).
#pragma once
#include <string>
#include <vector>

#include "cache/tuned_cache.hpp"
#include "tuner/bench/completion.hpp"
#include "tuner/run/runner.hpp"

namespace ktune::tuner {

struct AdamBenchRow {
  std::int64_t tensors = 0;
  std::int64_t numel = 0;
  std::string dtype;
  double eager_ms = 0, single_ms = 0, fused_ms = 0;
  double fused_p20_ms = 0, fused_p80_ms = 0;
  /// Every repetition of each column's measurement, in order: the statistics can be checked from them.
  std::vector<double> eager_samples_ms, single_samples_ms, fused_samples_ms;
  std::string fused_config, fused_source;
  double fused_gbs = 0;
  double fused_fraction_of_copy = 0;
};

struct AdamBenchReport {
  std::string device;
  int driver_version = 0;  ///< the CUDA driver API version (cuDriverGetVersion); 0 on the emulation
  std::string date;
  double copy_bandwidth_gbs = 0;
  std::string dtype;              ///< the parameters' (every row's)
  double bytes_per_element = 0;   ///< what the fused step moves an element, as its GB/s counts (0: no row)
  std::string method;
  std::vector<AdamBenchRow> rows;
  std::vector<std::string> warnings;  ///< stale tuned entries the lookups skipped
  Completion completion;  ///< the rows planned and measured, and the signal that stopped the run, if one did
  std::string markdown() const;
  nlohmann::json to_json() const;
};

AdamBenchReport run_adam_bench(Runner& runner, const std::vector<std::int64_t>& tensors,
                               const std::vector<std::int64_t>& numels, const std::string& dtype,
                               const cache::TunedCache* tuned, double copy_bandwidth_gbs,
                               const std::function<void(const AdamBenchRow&)>& progress = {},
                               const std::function<bool()>& should_stop = {});

}  // namespace ktune::tuner
