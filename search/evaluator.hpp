// What the search talks to: an evaluator that measures one config of a
// space (a GPU, the emulation backend, or a recorded space being replayed).
// The search never names a kernel.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "base/space.hpp"

namespace ktune::search {

/// The result of evaluating one config. A failure is a result (time = +inf
/// with a reason), never an exception.
struct Outcome {
  bool ok = false;
  double time_ms = std::numeric_limits<double>::infinity();  ///< median
  double p20_ms = std::numeric_limits<double>::infinity();
  double p80_ms = std::numeric_limits<double>::infinity();
  std::vector<double> samples_ms;  ///< every timed repetition, in order; empty when the evaluator kept none
  std::string failure;  ///< why it failed: "compile: ...", "validation: ...", "timeout", ...
  double cost_s = 0;    ///< seconds the evaluation cost (compile + benchmark), for time budgets
  double compile_s = 0;  ///< of cost_s, seconds compiling (0 from the binary cache)
};

class Evaluator {
 public:
  virtual ~Evaluator() = default;
  virtual const Space& space() const = 0;
  /// Static constraints: a config for which this is false is never evaluated.
  virtual bool is_valid(const Config& config, std::string* why = nullptr) const = 0;
  /// is_valid of the config whose values sit at these positions of their domains, in the order of
  /// space().params() (a search's point, search/sampling.hpp). The default builds the config and asks is_valid;
  /// an evaluator that keeps its records by position answers without building it (a strategy asks this of
  /// thousands of candidates per proposal).
  virtual bool is_valid_at(const std::vector<int>& positions) const;
  virtual Outcome evaluate(const Config& config) = 0;
  /// How many points of the space are valid, where known (0: not known): the
  /// share of the space a search has covered, for its estimate of the time left.
  virtual std::uint64_t valid_points() const { return 0; }
};

}  // namespace ktune::search
