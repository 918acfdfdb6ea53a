// Kernel Tuner's cache-file format (the JSON its `cache=` option writes and
// its simulation mode replays): reading, gzip'd or not, and writing ktune's
// search records in it, so ktune's tuning logs load into Kernel Tuner.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/space.hpp"
#include "search/search.hpp"

namespace ktune::search {

/// Reads a Kernel Tuner cache file, gzip'd or plain. A file Kernel Tuner was
/// still writing (no closing braces) is closed as Kernel Tuner itself does.
/// Throws kIo when unreadable, kInvalidInput naming the file when it is not a
/// Kernel Tuner cache (no "tune_params" / "cache").
nlohmann::json read_kernel_tuner_cache(const std::filesystem::path& file);

/// The header fields Kernel Tuner checks when it opens a cache.
struct KernelTunerHeader {
  std::string device_name = "unknown";
  std::string kernel_name = "kernel";
  nlohmann::json problem_size = nlohmann::json::array();
};

/// Kernel Tuner cache JSON for `records` over `space`: "tune_params_keys" in
/// the space's parameter order, one "cache" entry per record keyed by the
/// comma-joined values. A success has "time" (ms, the median) and, when the
/// outcome kept them, "times": the measured samples (ms), never a summary
/// standing in for them; a failure has "time" set to Kernel Tuner's error
/// string ("CompilationFailedConfig" for failures starting "compile",
/// "InvalidConfig" for "invalid"/"pruned", else "RuntimeFailedConfig").
/// Each record's cost_s goes into "benchmark_time" (ms).
nlohmann::json to_kernel_tuner_cache(const Space& space, const std::vector<Record>& records,
                                     const KernelTunerHeader& header);

/// Writes to_kernel_tuner_cache atomically; gzip'd when the name ends in ".gz".
void write_kernel_tuner_cache(const std::filesystem::path& file, const Space& space,
                              const std::vector<Record>& records, const KernelTunerHeader& header);

}  // namespace ktune::search
