// AdamW on the cpu backend (see optimizer.hpp).
#include "model/optimizer.hpp"

#include <fmt/format.h>

#include "base/error.hpp"

namespace ktune::model {

AdamW::AdamW(std::int64_t n, const templates::adamw::AdamwHyper& hyper)
    : hyper_(hyper), exp_avg_(n, 0.0f), exp_avg_sq_(n, 0.0f) {}

void AdamW::step(std::span<float> params, std::span<const float> grads, Parallel& parallel) {
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

std::int64_t AdamW::state_bytes() const {
  return static_cast<std::int64_t>((exp_avg_.size() + exp_avg_sq_.size()) * sizeof(float));
}

}  // namespace ktune::model
