// Compile checks: render and compile many variants of many families for one
// architecture (parallel, cached), with the resource report of each, and the
// rules a default config must meet (no spills, shared memory in the limit).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "templates/family.hpp"
#include "tuner/compile/compiler.hpp"

namespace ktune::tuner {

struct CompileCheckOptions {
  std::string arch = kDefaultArch;
  enum class Which { kDefaults, kSample, kAll } which = Which::kDefaults;
  std::uint64_t sample = 8;  ///< configs per family and problem class (kSample), beside the default
  std::uint64_t seed = 1;
  unsigned threads = 0;      ///< 0: env default
  /// Called as compilations finish: how many of how many unique sources, and how many came from the cache.
  std::function<void(std::size_t done, std::size_t total, std::size_t cached)> progress;
};

struct CompileCheckRow {
  std::string family;
  templates::Problem problem;
  Config config;
  bool is_default = false;
  CompileResult result;
  std::string failure;  ///< empty when the variant passed
};

struct CompileCheckSummary {
  std::vector<CompileCheckRow> rows;
  std::size_t invalid = 0;   ///< configs the families' constraints exclude ("invalid (constraints)")
  std::map<std::string, std::size_t> invalid_by_family;
  std::size_t unique_sources = 0;
  std::size_t not_compiled = 0;  ///< rows of a default config the problem's constraints exclude: never rendered
  std::size_t failures = 0;
  std::size_t cache_hits = 0;
  double seconds = 0;
  /// "compiled N variants (U unique sources, H of them cached) for sm_90: F failures, I invalid (constraints),
  /// T s", N the rows compiled (not those not_compiled, which count as failures)
  std::string line() const;
};

/// The configs a check compiles for one family and problem class on `limits`: the defaults (default_config, and
/// the arch default where it differs and is valid) first, then every other valid point (kAll) or a seeded sample
/// of `sample` of them, drawn without replacement (all where fewer are valid). `invalid` gains the points of the
/// space the constraints refuse (kSample and kAll look at every point).
std::vector<Config> configs_to_check(const templates::Family& family, const templates::Problem& problem,
                                     const templates::DeviceLimits& limits, const CompileCheckOptions& options,
                                     std::size_t& invalid);

/// Checks `families` (all registered when empty).
CompileCheckSummary compile_check(const std::vector<const templates::Family*>& families,
                                  const CompileCheckOptions& options, const Compiler& compiler);

}  // namespace ktune::tuner
