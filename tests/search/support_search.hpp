// Shared fixtures for the search tests: a small synthetic evaluator, and the
// recorded replay datasets, each loaded once per test binary.
#pragma once
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "search/evaluator.hpp"
#include "search/replay.hpp"

namespace ktune::test {

/// A 3-parameter space with a smooth bowl of a cost, a constraint (x + y
/// even is invalid for x == 0) and failures at z == 3.
class BowlEvaluator final : public search::Evaluator {
 public:
  BowlEvaluator()
      : space_({{"x", {0, 1, 2, 3, 4, 5, 6, 7}, ""}, {"y", {1, 2, 4, 8, 16, 32}, ""}, {"z", {0, 1, 2, 3}, ""}}) {}
  const Space& space() const override { return space_; }
  bool is_valid(const Config& c, std::string* why = nullptr) const override {
    const bool ok = !(c.at("x") == 0 && c.at("y") % 4 == 0);
    if (!ok && why) *why = "x = 0 needs y < 4";
    return ok;
  }
  search::Outcome evaluate(const Config& c) override {
    ++evaluations;
    ++counts[c];
    search::Outcome o;
    o.cost_s = 0.5;
    if (!is_valid(c)) invalid_evaluated = true;
    if (c.at("z") == 3) {
      o.failure = "compile: synthetic failure";
      return o;
    }
    const double dx = c.at("x") - 5.0, dy = std::log2(static_cast<double>(c.at("y"))) - 3.0, dz = c.at("z") - 1.0;
    o.ok = true;
    o.time_ms = 1.0 + dx * dx + dy * dy + 0.5 * dz * dz;
    o.p20_ms = o.p80_ms = o.time_ms;
    return o;
  }
  std::uint64_t valid_points() const override { return known_valid; }
  std::uint64_t known_valid = 0;  ///< what valid_points says (176 are)
  int evaluations = 0;
  bool invalid_evaluated = false;
  std::map<Config, int> counts;

 private:
  Space space_;
};

/// The replay dataset `name` (e.g. "convolution_milo_A100"), loaded once;
/// null when the shared datasets are absent.
inline search::ReplayEvaluator* replay_dataset(const std::string& name) {
  static std::map<std::string, std::unique_ptr<search::ReplayEvaluator>> loaded;
  const auto it = loaded.find(name);
  if (it != loaded.end()) return it->second.get();
  const auto path = std::filesystem::path(KTUNE_SOURCE_DIR) / ".." / "shared" / "replay" / (name + ".json.gz");
  std::unique_ptr<search::ReplayEvaluator> e;
  if (std::filesystem::exists(path)) e = std::make_unique<search::ReplayEvaluator>(path);
  return (loaded[name] = std::move(e)).get();
}

}  // namespace ktune::test
