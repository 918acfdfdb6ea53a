// Replaying a recorded tuning space: an evaluator backed by a Kernel Tuner
// cache file (a brute-forced space measured on a real GPU), so strategies are
// scored without a GPU. It talks only to recorded data and names no kernel.
//
// Parameter values: a parameter whose recorded values are all integers keeps
// them; any other parameter (floats, strings, booleans) is mapped to the
// index of each value in the order the file lists them (0, 1, 2, ...), and
// value_label() gives the original back.
#pragma once
#include <filesystem>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "search/evaluator.hpp"

namespace ktune::search {

class ReplayEvaluator final : public Evaluator {
 public:
  /// Loads a Kernel Tuner cache file (gzip'd or plain); throws kIo or
  /// kInvalidInput naming the file.
  explicit ReplayEvaluator(const std::filesystem::path& file);

  const Space& space() const override { return space_; }
  /// True for every config recorded in the file (failures included); configs
  /// absent from the file are invalid.
  bool is_valid(const Config& config, std::string* why = nullptr) const override;
  bool is_valid_at(const std::vector<int>& positions) const override;
  /// The recorded result: time (ms, mean of the recorded repetitions as Kernel
  /// Tuner stores it), p20/p80 of its repetitions, and cost_s = recorded
  /// compile + verification + benchmark time. Recorded failures fail with
  /// Kernel Tuner's reason ("CompilationFailedConfig", ...).
  Outcome evaluate(const Config& config) override;

  const std::string& device_name() const { return device_name_; }
  const std::string& kernel_name() const { return kernel_name_; }
  std::size_t recorded() const { return records_.size(); }
  std::size_t recorded_failures() const { return failures_; }
  /// The recorded cost of every config (s): what a brute-force search paid.
  double brute_force_s() const { return brute_force_s_; }
  /// The fastest recorded success (ms).
  double optimum_ms() const { return optimum_ms_; }
  /// The file's original value for `param` = `value` (identity for integer parameters).
  nlohmann::json value_label(const std::string& param, std::int64_t value) const;
  /// Fraction of the optimum reached by a time: optimum / time (0 for +inf).
  double fraction_of_optimum(double time_ms) const;

 private:
  struct Recorded {
    Outcome outcome;
  };
  Space space_;
  std::map<std::string, std::vector<nlohmann::json>> labels_;  ///< only index-mapped parameters
  std::unordered_map<std::uint64_t, Recorded> records_;
  std::string device_name_;
  std::string kernel_name_;
  std::size_t failures_ = 0;
  double optimum_ms_ = 0;
  double brute_force_s_ = 0;
};

}  // namespace ktune::search
