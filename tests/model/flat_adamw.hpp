// The tests' AdamW reference over a model's flat parameter buffer: the math
// is templates/adamw/reference.hpp's adamw_step_reference (the one
// implementation), the buffer split across threads — independent of the
// walk's per-tensor step (walk_adamw), which the backends run.
#pragma once
#include <fmt/format.h>

#include <cstdint>
#include <span>
#include <vector>

#include "base/error.hpp"
#include "model/parallel.hpp"
#include "templates/adamw/reference.hpp"

namespace ktune::test {

class FlatAdamW {
 public:
  /// State for `n` parameters (exp_avg and exp_avg_sq, zero-initialised).
  FlatAdamW(std::int64_t n, const templates::adamw::AdamwHyper& hyper)
      : hyper_(hyper), exp_avg_(static_cast<std::size_t>(n), 0.0f), exp_avg_sq_(static_cast<std::size_t>(n), 0.0f) {}

  /// One step: params updated in place from grads; the step counter advances.
  void step(std::span<float> params, std::span<const float> grads, model::Parallel& parallel) {
    KTUNE_REQUIRE(params.size() == exp_avg_.size() && grads.size() == exp_avg_.size(),
                  fmt::format("AdamW holds state for {} values, got {} parameters and {} gradients", exp_avg_.size(),
                              params.size(), grads.size()));
    templates::adamw::AdamwHyper h = hyper_;
    h.step = ++step_;
    parallel.for_range(static_cast<std::int64_t>(params.size()), [&](std::int64_t b, std::int64_t e, unsigned) {
      templates::adamw::adamw_step_reference(params.data() + b, grads.data() + b, exp_avg_.data() + b,
                                             exp_avg_sq_.data() + b, static_cast<std::size_t>(e - b), h);
    });
  }

  std::int64_t steps_taken() const { return step_; }
  std::int64_t state_bytes() const {
    return static_cast<std::int64_t>((exp_avg_.size() + exp_avg_sq_.size()) * sizeof(float));
  }

 private:
  templates::adamw::AdamwHyper hyper_;
  std::vector<float> exp_avg_, exp_avg_sq_;
  std::int64_t step_ = 0;
};

}  // namespace ktune::test
