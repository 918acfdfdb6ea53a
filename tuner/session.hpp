// A tuning session: a search strategy proposes configs of one family for
// one problem, a runner validates and times them, every result is appended
// to a session log as it arrives (so Ctrl-C or a crash loses nothing and
// --resume continues), and the winner goes into the tuned cache.
#pragma once
#include <functional>
#include <optional>
#include <string>

#include "cache/entry.hpp"
#include "tuner/runner.hpp"

namespace ktune::tuner {

struct TuneOptions {
  std::string strategy = "exhaustive";
  std::uint64_t max_evaluations = 0;  ///< 0: no limit
  double max_seconds = 0;             ///< 0: no limit
  std::uint64_t seed = 1;
  RunOptions run;                     ///< validation and timing of each evaluation
  std::string log_path;               ///< JSON-lines session log; empty: none
  bool resume = false;                ///< replay the log's results instead of re-running them
  int finalists = 3;                  ///< top configs re-timed to pick a stable winner
};

/// One evaluation as the session log records it.
struct Record {
  Config config;
  RunResult result;
};

struct TuneSummary {
  std::optional<Record> best;
  std::optional<Record> default_run;
  std::uint64_t evaluations = 0;
  std::uint64_t failures = 0;
  std::uint64_t resumed = 0;   ///< results taken from the log
  double seconds = 0;
  double speedup_over_default() const;
};

/// Progress after each evaluation: the record, the best so far, counts.
using Progress = std::function<void(const Record&, const TuneSummary&)>;

TuneSummary tune(const templates::Family& family, const templates::Problem& problem, Runner& runner,
                 const TuneOptions& options, const Progress& progress = {});

/// The cache key of `family`/`problem` on the runner's device.
cache::Key cache_key(const templates::Family& family, const templates::Problem& problem,
                     const templates::DeviceLimits& device);

/// The cache entry for a finished session's winner.
cache::Entry cache_entry(const templates::Family& family, const templates::Problem& problem,
                         const templates::DeviceLimits& device, const TuneSummary& summary);

}  // namespace ktune::tuner
