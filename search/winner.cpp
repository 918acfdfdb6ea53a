// The winner rule: medians with order-statistic confidence intervals, a
// noise band around the fastest, ties broken by a fixed order.
#include "search/winner.hpp"

#include <algorithm>
#include <cmath>

namespace ktune::search {

double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return NAN;
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const auto hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (pos - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

WinnerResult pick_winner(const std::vector<Candidate>& candidates, const WinnerOptions& options) {
  WinnerResult result;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    std::vector<double> t;
    for (double v : candidates[i].times_ms)
      if (std::isfinite(v)) t.push_back(v);
    if (t.empty()) continue;
    std::sort(t.begin(), t.end());
    CandidateStats s;
    s.candidate = i;
    s.repetitions = t.size();
    s.median_ms = percentile(t, 0.5);
    s.p20_ms = percentile(t, 0.2);
    s.p80_ms = percentile(t, 0.8);
    s.spread = s.median_ms > 0 ? (s.p80_ms - s.p20_ms) / s.median_ms : 0;
    // Distribution-free interval of the median: ranks n/2 ± z·√n/2.
    const double n = static_cast<double>(t.size());
    const double half = options.z * std::sqrt(n) / 2;
    const auto lo = static_cast<std::ptrdiff_t>(std::floor(n / 2 - half));
    const auto hi = static_cast<std::ptrdiff_t>(std::ceil(n / 2 + half));
    s.ci_low_ms = t[static_cast<std::size_t>(std::clamp<std::ptrdiff_t>(lo, 0, t.size() - 1))];
    s.ci_high_ms = t[static_cast<std::size_t>(std::clamp<std::ptrdiff_t>(hi - 1, 0, t.size() - 1))];
    result.ranked.push_back(s);
  }
  if (result.ranked.empty()) return result;
  std::stable_sort(result.ranked.begin(), result.ranked.end(), [&](const CandidateStats& a, const CandidateStats& b) {
    if (a.median_ms != b.median_ms) return a.median_ms < b.median_ms;
    return candidates[a.candidate].order < candidates[b.candidate].order;
  });
  const CandidateStats& fastest = result.ranked.front();
  result.band_ms = std::max(fastest.ci_high_ms, fastest.median_ms * (1 + options.min_relative_band));
  result.found = true;
  result.winner = fastest.candidate;
  for (CandidateStats& s : result.ranked) {
    s.tied = s.ci_low_ms <= result.band_ms || s.median_ms <= result.band_ms;
    if (!s.tied) continue;
    ++result.tied;
    if (candidates[s.candidate].order < candidates[result.winner].order) result.winner = s.candidate;
  }
  return result;
}

}  // namespace ktune::search
