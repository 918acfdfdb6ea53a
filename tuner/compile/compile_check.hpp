// Compile checks: render and compile many variants of many families for one
// architecture (parallel, cached), with the resource report of each, and the
// rules a default config must meet (no spills, shared memory in the limit).
#pragma once
#include <cstdint>
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
  std::size_t invalid_skipped = 0;   ///< configs the families' constraints exclude
  std::size_t unique_sources = 0;
  std::size_t failures = 0;
  std::size_t cache_hits = 0;
  double seconds = 0;
  std::string line() const;  ///< "compiled N variants (U sources) for sm_90: F failures, H cached, T s"
};

/// Checks `families` (all registered when empty).
CompileCheckSummary compile_check(const std::vector<const templates::Family*>& families,
                                  const CompileCheckOptions& options, const Compiler& compiler);

}  // namespace ktune::tuner
