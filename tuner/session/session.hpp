// A tuning session: the search driver (search/search.hpp) walks one family's
// space for one problem with a strategy and a budget; each evaluation is a
// runner's validated, timed run, appended to a session log as it arrives (so
// Ctrl-C or a crash loses nothing and --resume continues); the fastest few
// are timed again and the noise-aware winner rule (search/winner.hpp) picks
// the config that goes into the tuned cache.
#pragma once
#include <functional>
#include <optional>
#include <string>

#include "cache/entry.hpp"
#include "search/search.hpp"
#include "tuner/run/runner.hpp"
#include "tuner/session/tuned_kernels.hpp"

namespace ktune::tuner {

/// What `ktune tune` and Runtime::tune search with unless told: auto, until
/// 200 evaluations in a row found nothing faster or an hour of compiles and
/// benchmarks passed, whichever comes first. On the eight recorded spaces
/// (bench/results/replay.md; `ktune replay --strategy auto --runs 200 --seed 1
/// --budget plateau:100,plateau:150,plateau:200`), plateau:150 already ends
/// the median run within 99 % of the optimum on each (0.994 at worst); 200
/// lifts what 150 leaves short, convolution_RTX_3090's lower quartile (0.989
/// to 1.000) and dedispersion_milo_A100's median (0.997 to 0.999), for 50 to
/// 110 more evaluations a session.
inline constexpr const char* kDefaultStrategy = "auto";
inline constexpr const char* kDefaultBudget = "plateau:200+1h";

struct TuneOptions {
  std::string strategy = "exhaustive";
  std::string budget;       ///< search::parse_budget syntax ("200", "15m", "plateau:50", "200+15m"); empty: none
  std::uint64_t seed = 1;
  RunOptions run;           ///< validation and timing of each evaluation
  std::string log_path;     ///< JSON-lines session log; empty: none
  /// log_path is the default one (not the user's --log): another session
  /// holding it does not stop this one (unless resuming), which logs beside it.
  bool default_log = false;
  bool resume = false;      ///< take the log's results instead of re-running them
  int finalists = 3;        ///< fastest configs timed again for the winner rule (with the default when above 1)
  /// This session takes the configs whose space index is shard_index modulo
  /// shard_count (`--shard i/n`: one slice per Slurm array task or MPI rank;
  /// `ktune cache merge` joins the winners).
  std::uint64_t shard_index = 0;
  std::uint64_t shard_count = 1;
  /// Threads compiling ahead of the benchmark what the strategy expects to
  /// propose next (GPU runner; search::Strategy::upcoming); 0 turns it off.
  unsigned compile_ahead_threads = 0;
  /// Asked before each evaluation: true ends the search there, before the
  /// budget (a stop signal); the best so far is the winner, from the
  /// search's timings (no finalists timed again).
  std::function<bool()> should_stop;
  /// Told what the user should know before the search: a resumed log's
  /// unreadable lines, whose evaluations run again.
  std::function<void(const std::string&)> on_note;
  /// The config the tuned cache holds for this problem (tune --cache): it is
  /// measured right after the default (after the budget, when that ran out
  /// first), so a session replaces it only with a config faster in the same
  /// session.
  std::optional<Config> incumbent;
  /// The configs measured by the search that found the incumbent (its cache entry's `evaluations`): an entry
  /// that keeps it keeps that count, where larger than this session's.
  std::int64_t incumbent_evaluations = 0;
  /// Search only the configs that sum in a fixed order (Family::deterministic), from the one nearest the default
  /// that does (session_default): the winner is what a deterministic run takes. A resumed log's other results
  /// stay out of it.
  bool deterministic = false;
};

/// One evaluation as the session log records it.
struct Record {
  Config config;
  RunResult result;
  bool resumed = false;  ///< read from the session log (--resume), not measured by this session
};

struct TuneSummary {
  std::optional<Record> best;
  /// Where `best` does not sum in a fixed order (Family::deterministic): the
  /// fastest measured config that does, timed beside the finalists where they
  /// were timed again (what a deterministic run takes); else empty.
  std::optional<Record> best_deterministic;
  std::optional<Record> default_run;
  std::uint64_t evaluations = 0;  ///< the default's included
  std::uint64_t failures = 0;     ///< pruned ones included
  std::uint64_t pruned = 0;       ///< rejected from the resource report before any launch
  std::uint64_t resumed = 0;      ///< results taken from the log
  std::uint64_t tied = 0;         ///< finalists the winner rule could not tell apart
  std::uint64_t valid_points = 0;  ///< the space's points valid for the problem on the device (this shard's)
  std::string stopped_by;
  std::vector<search::Record> records;  ///< every evaluation of this search, in order (for exports)
  /// The finalists as timed again side by side (what the winner rule judged), fastest in the search first.
  std::vector<Record> finalists;
  /// The finalists as the log's finished session timed them again: a resumed session that measured nothing new
  /// judges those samples (its winner is that session's) rather than timing them a second time.
  bool finalists_from_log = false;
  /// The finalists that failed when timed again (a flaky variant: a race, a fault, a hang), with that run's
  /// failure: none of them wins, whatever the search measured.
  std::vector<Record> disqualified;
  /// Where the winner is not the search's fastest (the winner rule found them within noise, and the cache's
  /// config or the default wins a tie): both, with their times; else empty.
  std::string kept_note;
  /// The configs measured by the searches behind the winner: this session's, or the incumbent's search's where
  /// it stays and measured more.
  std::uint64_t evaluations_behind = 0;
  /// Whether the cache's config for the problem (TuneOptions::incumbent) competed with the winner: measured here,
  /// or no longer valid here, or there was none. Where not (a stop came first, or it lies in another shard), the
  /// winner replaces the cache's entry only where it is faster (cache::CacheFile::put_winner's rule).
  bool incumbent_competed = true;
  std::string log_path;                 ///< where the session logged (TuneOptions::log_path, or beside it)
  std::string previous_log;             ///< where the default log it replaced went (at its first result), or ""
  double seconds = 0;
  /// Of `seconds`, what evaluations waited for their compiles (those compiled ahead waited for none).
  double compile_seconds = 0;
  double speedup_over_default() const;
};

/// After each evaluation: the record and the search's progress (best, counts, ETA).
using Progress = std::function<void(const Record&, const search::Progress&)>;

TuneSummary tune(const templates::Family& family, const templates::Problem& problem, Runner& runner,
                 const TuneOptions& options, const Progress& progress = {});

/// Where a search stands after an evaluation, as a progress line says it: the best time so far and its config
/// ("best none" before a config ran to the end), then `eta`, then why `last` failed where it did.
std::string standing(const Record& last, const search::Progress& progress, const std::string& eta);

/// The finalists as timed again side by side: config, time_ms, p20_ms, p80_ms each (the log's winner line and
/// tune's --json).
nlohmann::json finalists_json(const TuneSummary& summary);
/// The finalists that failed when timed again: config, failure each (the log's winner line and tune's --json).
nlohmann::json disqualified_json(const TuneSummary& summary);

/// The config a session measures first, which its speed-ups are over: default_on's, and with `deterministic` the
/// valid config nearest it that sums in a fixed order (choose_config's; kInvalidInput where none does).
Config session_default(const templates::Family& family, const templates::Problem& problem,
                       const templates::DeviceLimits& device, bool deterministic);

/// Sets `options`' incumbent (and its count of configs measured) from the entry of `entries` for `family` on
/// `problem` and `device`, where there is one whose config reads (with `options.deterministic`, its deterministic
/// pick where its config sums by atomics): the entry of the session's very key (source, NVRTC, driver), else the
/// newest of another, whose config competes with no count of configs measured; returns whether it found one.
bool take_incumbent(TuneOptions& options, const std::vector<cache::Entry>& entries, const templates::Family& family,
                    const templates::Problem& problem, const templates::DeviceLimits& device);

/// Where `ktune tune` logs a session when no --log is given: under the cache
/// folder (env::session_log_dir()), `<family>.<dtype>-<dim><value>....log`, so
/// the working folder stays clean and --resume finds it again; a shard's (--shard i/n, n > 1) ends
/// `.shard<i>of<n>.log`, so shards sharing the folder keep apart.
std::string default_log_path(const templates::Family& family, const templates::Problem& problem,
                             std::uint64_t shard_index = 0, std::uint64_t shard_count = 1);

/// Whether the file at `path` holds a session's results, not just a header
/// (a log that a fresh session refuses to replace where it is the user's
/// --log): more than one non-empty line.
bool log_holds_results(const std::string& path);

/// A session log read back: its header lines ("session": family, problem,
/// arch, gpu, backend, source_hash, strategy, seed, peak_bandwidth_gbs), one
/// per session that searched it (a resumed one with another strategy or seed
/// adds its own), and its evaluations in the order they ran.
/// Lines of a session log that do not parse: `count` of them followed by
/// another line (the first at line `first`, from 1), which no kill leaves; and
/// whether the last line is one (cut short, as a kill mid-write leaves it).
struct UnreadableLines {
  std::size_t count = 0;
  std::size_t first = 0;
  bool last_cut = false;
};
/// What to say of `unreadable` lines of the log at `path` (empty when there
/// are none before its last line); `then` says what becomes of their
/// evaluations.
std::string unreadable_note(const std::string& path, const UnreadableLines& unreadable, const std::string& then);

struct SessionLogContents {
  std::vector<nlohmann::json> sessions;  ///< in the order they ran; never empty once read
  const nlohmann::json& header() const { return sessions.back(); }  ///< the last session's
  /// The last finished session's winner ("config", "time_ms", "p20_ms",
  /// "p80_ms" timed beside the finalists, "tied", "stopped_by"); null when
  /// none finished (a stopped or killed session).
  nlohmann::json winner;
  std::vector<Record> records;
  UnreadableLines unreadable;  ///< skipped
};
/// Throws kInvalidInput when the file is missing or has no session header;
/// lines that do not parse (cut short by a crash) are skipped and counted.
SessionLogContents read_session_log(const std::string& path);

/// The cache entry for a finished session's winner.
cache::Entry cache_entry(const templates::Family& family, const templates::Problem& problem,
                         const templates::DeviceLimits& device, const TuneSummary& summary);

}  // namespace ktune::tuner
