// Named model sizes (the seed reports') and their checks.
#include "model/config.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <limits>

#include "base/error.hpp"

namespace ktune::model {

namespace {

struct Named {
  const char* name;
  std::int64_t vocab, d_model, d_ff, layers, heads;
};

// vocab 10,000 throughout the seeds; `tiny` keeps tests and fixtures small.
constexpr Named kModels[] = {
    {"small", 10000, 768, 3072, 12, 12},  {"medium", 10000, 1024, 4096, 24, 16},
    {"large", 10000, 1280, 5120, 36, 20}, {"xl", 10000, 1600, 6400, 48, 25},
    {"2.7B", 10000, 2560, 10240, 32, 32}, {"tiny", 128, 64, 192, 2, 4},
};

}  // namespace

void ModelConfig::validate() const {
  KTUNE_REQUIRE(vocab > 0, fmt::format("vocab must be positive, got {}", vocab));
  KTUNE_REQUIRE(d_model > 0, fmt::format("d_model must be positive, got {}", d_model));
  KTUNE_REQUIRE(d_ff > 0, fmt::format("d_ff must be positive, got {}", d_ff));
  KTUNE_REQUIRE(layers > 0, fmt::format("layers must be positive, got {}", layers));
  KTUNE_REQUIRE(heads > 0, fmt::format("heads must be positive, got {}", heads));
  KTUNE_REQUIRE(d_model % heads == 0,
                fmt::format("heads ({}) must divide d_model ({})", heads, d_model));
  KTUNE_REQUIRE(head_dim() % 2 == 0,
                fmt::format("head dim d_model/heads = {} must be even (RoPE rotates pairs)", head_dim()));
}

std::int64_t ModelConfig::parameter_count() const {
  const std::int64_t per_layer = 4 * d_model * d_model + 3 * d_model * d_ff + 2 * d_model;
  return 2 * vocab * d_model + layers * per_layer + d_model;
}

double ModelConfig::train_flops_per_token(std::int64_t context) const {
  const double matmul_weights = static_cast<double>(layers) * (4.0 * d_model * d_model + 3.0 * d_model * d_ff) +
                                static_cast<double>(vocab) * d_model;
  return 6.0 * matmul_weights + 12.0 * static_cast<double>(layers) * d_model * static_cast<double>(context);
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& m : kModels) names.emplace_back(m.name);
  return names;
}

ModelConfig model_config(const std::string& name) {
  for (const auto& m : kModels) {
    if (name == m.name) {
      ModelConfig c;
      c.name = m.name;
      c.vocab = m.vocab;
      c.d_model = m.d_model;
      c.d_ff = m.d_ff;
      c.layers = m.layers;
      c.heads = m.heads;
      return c;
    }
  }
  throw_error(ErrorKind::kInvalidInput,
              fmt::format("unknown model '{}'; known: {}", name, fmt::join(model_names(), ", ")));
}

const char* to_string(Recompute recompute) {
  switch (recompute) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSwiglu:
      return "swiglu";
    case Recompute::kBlocks:
      return "blocks";
  }
  return "?";
}

Recompute parse_recompute(const std::string& text) {
  for (const Recompute r : {Recompute::kNone, Recompute::kSwiglu, Recompute::kBlocks})
    if (text == to_string(r)) return r;
  throw_error(ErrorKind::kInvalidInput,
              fmt::format("recompute '{}'; accepted: none, swiglu, blocks", text));
}

void RunShape::validate() const {
  KTUNE_REQUIRE(batch > 0, fmt::format("batch must be positive, got {}", batch));
  KTUNE_REQUIRE(context > 0, fmt::format("context length must be positive, got {}", context));
  KTUNE_REQUIRE(micro_batches > 0, fmt::format("micro-batches per step must be positive, got {}", micro_batches));
  // Counts a step's tokens fit in without overflow, far beyond any memory.
  constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
  KTUNE_REQUIRE(batch <= kMax && context <= kMax && micro_batches <= kMax,
                fmt::format("batch {}, context {} and micro-batches {}: each must be at most {}", batch, context,
                            micro_batches, kMax));
  KTUNE_REQUIRE(batch * context <= kMax / micro_batches,
                micro_batches == 1
                    ? fmt::format("a step of {} windows of {} tokens: more than {} tokens", batch, context, kMax)
                    : fmt::format("a step of {} micro-batches of {} windows of {} tokens: more than {} tokens",
                                  micro_batches, batch, context, kMax));
}

}  // namespace ktune::model
