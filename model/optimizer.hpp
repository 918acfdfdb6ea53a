// AdamW over a model's flat parameter buffer on the cpu backend: the math is
// templates/adamw/reference.hpp's adamw_step_reference (one implementation),
// the buffer split across threads.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "model/parallel.hpp"
#include "templates/adamw/reference.hpp"

namespace ktune::model {

class AdamW {
 public:
  /// State for `n` parameters (exp_avg and exp_avg_sq, zero-initialised).
  AdamW(std::int64_t n, const templates::adamw::AdamwHyper& hyper);

  /// One step: params updated in place from grads; the step counter advances.
  void step(std::span<float> params, std::span<const float> grads, Parallel& parallel);

  std::int64_t steps_taken() const { return step_; }
  std::int64_t state_bytes() const;
  templates::adamw::AdamwHyper& hyper() { return hyper_; }

 private:
  templates::adamw::AdamwHyper hyper_;
  std::vector<float> exp_avg_, exp_avg_sq_;
  std::int64_t step_ = 0;
};

}  // namespace ktune::model
