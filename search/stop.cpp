// Stop conditions and the budget words the CLI accepts.
#include "search/stop.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "base/error.hpp"

namespace ktune::search {

double EvaluationBudget::progress(const SearchState& s) const {
  return max_ == 0 ? 1.0 : std::min(1.0, static_cast<double>(s.evaluations) / static_cast<double>(max_));
}
std::string EvaluationBudget::describe() const {
  return fmt::format("{} evaluation{}", max_, max_ == 1 ? "" : "s");
}

double TimeBudget::progress(const SearchState& s) const {
  return seconds_ <= 0 ? 1.0 : std::min(1.0, s.cost_s / seconds_);
}
std::string TimeBudget::describe() const { return fmt::format("{:g} s of evaluation time", seconds_); }

std::string Plateau::describe() const { return fmt::format("{} evaluations without improvement", patience_); }

bool AnyOf::done(const SearchState& s) const {
  return std::any_of(parts_.begin(), parts_.end(), [&](const auto& p) { return p->done(s); });
}
double AnyOf::progress(const SearchState& s) const {
  double p = 0;
  for (const auto& part : parts_) p = std::max(p, part->progress(s));
  return p;
}
std::string AnyOf::describe() const {
  std::string out;
  for (const auto& part : parts_) out += (out.empty() ? "" : " or ") + part->describe();
  return out;
}

namespace {
const char* kBudgetHelp = "a budget is N or Nevals (evaluations), Ns/Nm/Nh (time), plateau:N, joined by '+'";

std::unique_ptr<StopCondition> parse_one(const std::string& word) {
  KTUNE_REQUIRE(!word.empty(), fmt::format("empty budget; {}", kBudgetHelp));
  if (word.rfind("plateau:", 0) == 0) {
    // Digits only: strtoull took "-5" as 2^64 - 5.
    const std::string n = word.substr(8);
    std::uint64_t v = 0;
    const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), v);
    KTUNE_REQUIRE(!n.empty() && ec == std::errc() && end == n.data() + n.size() && v > 0,
                  fmt::format("bad budget '{}'; {} (N a whole number from 1 to 2^64 - 1)", word, kBudgetHelp));
    return std::make_unique<Plateau>(v);
  }
  char* end = nullptr;
  const double v = std::strtod(word.c_str(), &end);
  const std::string unit(end);
  KTUNE_REQUIRE(end != word.c_str() && std::isfinite(v), fmt::format("bad budget '{}'; {}", word, kBudgetHelp));
  KTUNE_REQUIRE(v >= 0, fmt::format("bad budget '{}': a budget is not negative; give at least 1 (or 1s)", word));
  KTUNE_REQUIRE(v > 0, fmt::format("bad budget '{}': a budget of no evaluations or no time runs nothing; give at "
                                   "least 1 (or 1s)",
                                   word));
  if (unit.empty() || unit == "evals") {
    KTUNE_REQUIRE(v < 0x1p64, fmt::format("bad budget '{}': past the largest count of evaluations, 2^64 - 1", word));
    KTUNE_REQUIRE(v == static_cast<double>(static_cast<std::uint64_t>(v)),
                  fmt::format("bad budget '{}': evaluations must be a whole number", word));
    return std::make_unique<EvaluationBudget>(static_cast<std::uint64_t>(v));
  }
  if (unit == "s") return std::make_unique<TimeBudget>(v);
  if (unit == "m") return std::make_unique<TimeBudget>(v * 60);
  if (unit == "h") return std::make_unique<TimeBudget>(v * 3600);
  throw_error(ErrorKind::kInvalidInput, fmt::format("bad budget '{}'; {}", word, kBudgetHelp));
}
}  // namespace

std::unique_ptr<StopCondition> parse_budget(const std::string& text) {
  std::vector<std::unique_ptr<StopCondition>> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t plus = text.find('+', start);
    parts.push_back(parse_one(text.substr(start, plus == std::string::npos ? std::string::npos : plus - start)));
    if (plus == std::string::npos) break;
    start = plus + 1;
  }
  if (parts.size() == 1) return std::move(parts[0]);
  return std::make_unique<AnyOf>(std::move(parts));
}

}  // namespace ktune::search
