// A noise-aware, deterministic winner: given repeated timings of the top
// candidates, configs whose times cannot be told apart from the fastest are
// tied, and ties go to a fixed order (the smallest space index), so two
// sessions on the same GPU pick the same config even though their fastest
// measurement differs by noise.
#pragma once
#include <cstdint>
#include <vector>

#include "base/space.hpp"

namespace ktune::search {

/// Repeated timings of one candidate.
struct Candidate {
  std::uint64_t order = 0;  ///< the fixed tie-break key, e.g. the space index (smaller wins)
  Config config;
  std::vector<double> times_ms;  ///< all repetitions; non-finite values are dropped
};

/// Statistics of one candidate.
struct CandidateStats {
  std::size_t candidate = 0;  ///< position in the input
  double median_ms = 0;
  double p20_ms = 0;
  double p80_ms = 0;
  double ci_low_ms = 0;   ///< confidence interval of the median (order statistics, WinnerOptions::z)
  double ci_high_ms = 0;
  double spread = 0;      ///< (p80 - p20) / median
  std::size_t repetitions = 0;
  bool tied = false;      ///< inside the noise band of the fastest
};

struct WinnerOptions {
  /// Normal quantile of the median's confidence interval (93 %): two intervals that do not overlap differ at
  /// the 1 % level (z·√2 = 2.58). 95 % intervals (1.96) test at 0.6 %, and at 10 repetitions take ranks 1..8,
  /// which called configs whose middle repetitions lie apart tied; 2..7 here.
  double z = 1.82;
  double min_relative_band = 0.0;  ///< also tie anything within this fraction of the fastest median
};

struct WinnerResult {
  bool found = false;               ///< false when no candidate has a finite timing
  std::size_t winner = 0;           ///< position in the input
  std::vector<CandidateStats> ranked;  ///< by median, fastest first (ties by order)
  std::size_t tied = 0;             ///< candidates inside the band, winner included
  double band_ms = 0;               ///< upper edge of the band: max(fastest CI high, median × (1 + min band))
};

/// Percentile (linear interpolation) of sorted values, q in [0, 1].
double percentile(const std::vector<double>& sorted, double q);

/// The rule: the fastest median sets the band (the upper end of its
/// confidence interval, or median × (1 + min_relative_band) if larger); every
/// candidate whose interval reaches below the band's edge is tied with it;
/// among the tied, the smallest `order` wins.
WinnerResult pick_winner(const std::vector<Candidate>& candidates, const WinnerOptions& options = {});

}  // namespace ktune::search
