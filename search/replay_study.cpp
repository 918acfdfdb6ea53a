// Seeded replay runs of one strategy, summarised per budget.
#include "search/replay_study.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>

#include "base/error.hpp"
#include "search/search.hpp"
#include "search/winner.hpp"

namespace ktune::search {

namespace {
/// "N%" as seconds of the brute-force time.
double share_seconds(const std::string& word, double brute_force_s) {
  char* end = nullptr;
  const double v = std::strtod(word.c_str(), &end);
  KTUNE_REQUIRE(end != word.c_str() && v > 0 && std::string(end) == "%",
                fmt::format("bad budget '{}': give a share of the brute-force time as N%", word));
  KTUNE_REQUIRE(brute_force_s > 0, fmt::format("budget '{}' needs the brute-force time", word));
  return v / 100 * brute_force_s;
}
}  // namespace

ReplayBudget parse_replay_budget(const std::string& text, double brute_force_s) {
  if (text.find("plateau:") != std::string::npos || text.find('+') != std::string::npos) {
    // A tuning session's stop condition; shares of the brute-force time become seconds.
    std::string words;
    std::size_t start = 0;
    while (true) {
      const std::size_t plus = text.find('+', start);
      std::string word = text.substr(start, plus == std::string::npos ? std::string::npos : plus - start);
      if (!word.empty() && word.back() == '%') word = fmt::format("{}s", share_seconds(word, brute_force_s));
      words += (words.empty() ? "" : "+") + word;
      if (plus == std::string::npos) break;
      start = plus + 1;
    }
    ReplayBudget b;
    b.label = text;
    b.stop = parse_budget(words);
    return b;
  }
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  const std::string unit(end);
  KTUNE_REQUIRE(end != text.c_str() && v > 0 &&
                    (unit.empty() || unit == "evals" || unit == "s" || unit == "m" || unit == "h" || unit == "%"),
                fmt::format("bad budget '{}': give evaluations (100), recorded time (600s, 10m, 1h) or a share of "
                            "the brute-force time (10%)",
                            text));
  KTUNE_REQUIRE(unit != "%" || brute_force_s > 0, fmt::format("budget '{}' needs the brute-force time", text));
  const bool evaluations = unit.empty() || unit == "evals";
  if (evaluations) parse_budget(text);  // a count as tune takes it: a whole number, at most 2^64 - 1
  ReplayBudget b;
  b.label = text;
  b.is_time = !evaluations;
  b.amount = unit == "m" ? v * 60 : unit == "h" ? v * 3600 : unit == "%" ? share_seconds(text, brute_force_s) : v;
  return b;
}

Quartiles quartiles(std::vector<double> values) {
  Quartiles q;
  if (values.empty()) return q;
  std::sort(values.begin(), values.end());
  auto at = [&](double p) {
    const double pos = p * static_cast<double>(values.size() - 1);
    const auto lo = static_cast<std::size_t>(std::floor(pos));
    const auto hi = std::min(lo + 1, values.size() - 1);
    const double frac = pos - static_cast<double>(lo);
    if (frac == 0) return values[lo];  // a run's own value, whatever follows it
    if (!std::isfinite(values[hi])) return values[hi];
    return values[lo] + frac * (values[hi] - values[lo]);
  };
  q.p25 = at(0.25);
  q.median = at(0.5);
  q.p75 = at(0.75);
  if (const std::size_t l = median_interval_rank(values.size()); l > 0) {
    q.median_lo = values[l - 1];
    q.median_hi = values[values.size() - l];
  }
  return q;
}

std::size_t median_interval_rank(std::size_t n) {
  // P(B = i) = C(n, i) / 2^n, in logs (n of thousands overflows a double's 2^n).
  const auto log_p = [&](std::size_t i) {
    const double nd = static_cast<double>(n), id = static_cast<double>(i);
    return std::lgamma(nd + 1) - std::lgamma(id + 1) - std::lgamma(nd - id + 1) - nd * std::log(2.0);
  };
  double below = 0;  // P(B <= l - 1), for the l being tried
  std::size_t l = 0;
  while (l < n / 2) {
    const double next = below + std::exp(log_p(l));  // P(B <= l)
    if (next > 0.025) break;
    below = next;
    ++l;
  }
  return l;
}

namespace {
/// Runs until every budget is spent: the largest evaluation count, the
/// largest time and every stop condition.
class UntilAll final : public StopCondition {
 public:
  UntilAll(double evals, double seconds, std::vector<const StopCondition*> stops)
      : evals_(evals), seconds_(seconds), stops_(std::move(stops)) {}
  bool done(const SearchState& s) const override {
    return static_cast<double>(s.evaluations) >= evals_ && s.cost_s >= seconds_ &&
           std::all_of(stops_.begin(), stops_.end(), [&](const StopCondition* c) { return c->done(s); });
  }
  double progress(const SearchState&) const override { return 0; }
  std::string describe() const override { return "every budget of the study"; }

 private:
  double evals_, seconds_;
  std::vector<const StopCondition*> stops_;
};

/// CPU time of the calling thread (ms): unlike a wall clock, not inflated
/// while other work on the machine holds the core.
double thread_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

/// Forwards to a strategy and adds the CPU time of its next() and report() calls.
class Timed final : public Strategy {
 public:
  explicit Timed(Strategy& inner) : inner_(inner) {}
  std::optional<Config> next() override {
    const double start = thread_cpu_ms();
    auto c = inner_.next();
    pending_ms_ = thread_cpu_ms() - start;
    return c;
  }
  void report(const Config& config, const Outcome& outcome) override {
    const double start = thread_cpu_ms();
    inner_.report(config, outcome);
    const double ms = pending_ms_ + thread_cpu_ms() - start;
    pending_ms_ = 0;
    total_ms += ms;
    max_ms = std::max(max_ms, ms);
    ++proposals;
  }

  double total_ms = 0, max_ms = 0;
  std::uint64_t proposals = 0;

 private:
  Strategy& inner_;
  double pending_ms_ = 0;
};
}  // namespace

ReplayStudyResult run_replay_study(ReplayEvaluator& evaluator, const ReplayStudyOptions& options) {
  KTUNE_REQUIRE(!options.budgets.empty(), "a replay study needs at least one budget");
  KTUNE_REQUIRE(options.runs > 0, "a replay study needs at least one run");
  const auto start = std::chrono::steady_clock::now();
  double max_evals = 0, max_seconds = 0;
  std::vector<const StopCondition*> stops;
  for (const auto& b : options.budgets) {
    if (b.stop) stops.push_back(b.stop.get());
    else if (b.is_time) max_seconds = std::max(max_seconds, b.amount);
    else max_evals = std::max(max_evals, b.amount);
  }

  ReplayStudyResult result;
  result.strategy = options.strategy;
  result.device = evaluator.device_name();
  result.optimum_ms = evaluator.optimum_ms();
  result.runs = options.runs;
  std::vector<std::vector<double>> fractions(options.budgets.size()), stopped_evals(options.budgets.size()),
      stopped_s(options.budgets.size());
  std::vector<double> to_target, seconds_to_target;
  double proposal_ms = 0;
  std::uint64_t proposals = 0;
  for (int run = 0; run < options.runs; ++run) {
    StrategyContext context{&evaluator.space(), &evaluator, options.seed + static_cast<std::uint64_t>(run)};
    const double setup_start = thread_cpu_ms();
    auto strategy = make_strategy(options.strategy, context);
    result.setup_ms_max = std::max(result.setup_ms_max, thread_cpu_ms() - setup_start);
    Timed timed(*strategy);
    // The search's state after each evaluation: the best time and the cost spent by then.
    std::vector<SearchState> states;
    SearchCallbacks callbacks;
    callbacks.on_progress = [&](const Progress& p) { states.push_back(*p.state); };
    UntilAll stop(max_evals, max_seconds, stops);
    run_search(evaluator, timed, stop, callbacks);
    proposal_ms += timed.total_ms;
    proposals += timed.proposals;
    result.proposal_ms_max = std::max(result.proposal_ms_max, timed.max_ms);

    // The evaluations within the longest budget: the run may end past every
    // one (a time budget is spent by the evaluation that crosses it).
    std::size_t within_any = 0;
    for (std::size_t b = 0; b < options.budgets.size(); ++b) {
      const ReplayBudget& budget = options.budgets[b];
      if (budget.stop) {
        // Where a tuning session with this stop condition would have ended (the space's end at the latest).
        std::size_t end = 0;
        while (end + 1 < states.size() && !budget.stop->done(states[end])) ++end;
        fractions[b].push_back(evaluator.fraction_of_optimum(states.empty() ? INFINITY : states[end].best_ms));
        stopped_evals[b].push_back(static_cast<double>(states.empty() ? 0 : end + 1));
        stopped_s[b].push_back(states.empty() ? 0 : states[end].cost_s);
        within_any = std::max(within_any, states.empty() ? 0 : end + 1);
        continue;
      }
      double found = INFINITY;
      std::size_t within = 0;
      for (std::size_t i = 0; i < states.size(); ++i) {
        const bool in =
            budget.is_time ? states[i].cost_s <= budget.amount : static_cast<double>(i + 1) <= budget.amount;
        if (!in) break;
        found = states[i].best_ms;
        within = i + 1;
      }
      fractions[b].push_back(evaluator.fraction_of_optimum(found));
      within_any = std::max(within_any, within);
    }
    // The first evaluation at the target, within one of the budgets (as the
    // budget table counts it): its evaluations and its recorded time, or
    // neither when no budget reached it.
    double reached = INFINITY, reached_s = INFINITY;
    for (std::size_t i = 0; i < within_any; ++i)
      if (evaluator.fraction_of_optimum(states[i].best_ms) >= options.target) {
        reached = static_cast<double>(i + 1);
        reached_s = states[i].cost_s;
        break;
      }
    if (std::isfinite(reached)) ++result.runs_reaching_target;
    to_target.push_back(reached);
    seconds_to_target.push_back(reached_s);
    if (options.on_run) options.on_run(run + 1);
  }
  for (std::size_t b = 0; b < options.budgets.size(); ++b)
    result.budgets.push_back(
        {options.budgets[b], quartiles(fractions[b]), quartiles(stopped_evals[b]), quartiles(stopped_s[b])});
  result.evals_to_target = quartiles(to_target);
  result.seconds_to_target = quartiles(seconds_to_target);
  result.evals_to_target_runs = std::move(to_target);
  result.seconds_to_target_runs = std::move(seconds_to_target);
  result.proposal_ms_mean = proposals > 0 ? proposal_ms / static_cast<double>(proposals) : 0;
  result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace ktune::search
