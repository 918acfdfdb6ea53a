// The parameter tensors of the CS336 Transformer LM, named as in its PyTorch
// state dict, laid out back to back in one flat buffer (so gradients and
// optimizer state share one layout and AdamW sees one contiguous range).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.hpp"

namespace ktune::model {

/// One named tensor of the flat buffer. Linear weights are (out, in).
struct ParamInfo {
  std::string name;                 // e.g. "layers.0.attn.q_proj.weight"
  std::vector<std::int64_t> shape;  // e.g. {d_model, d_model}
  std::int64_t offset = 0;          // elements from the buffer's start
  std::int64_t numel = 0;
};

/// Offsets of one block's tensors.
struct BlockParams {
  std::int64_t q = 0, k = 0, v = 0, o = 0;  // (C, C) each
  std::int64_t ln1 = 0, ln2 = 0;            // (C,)
  std::int64_t w1 = 0, w3 = 0;              // (F, C)
  std::int64_t w2 = 0;                      // (C, F)
};

/// Where every tensor lives; `tensors` is in state-dict order.
struct ParameterLayout {
  std::vector<ParamInfo> tensors;
  std::int64_t embedding = 0;  // (V, C) token_embeddings.weight
  std::vector<BlockParams> blocks;
  std::int64_t ln_final = 0;   // (C,)
  std::int64_t lm_head = 0;    // (V, C)
  std::int64_t total = 0;

  /// Tensor by name; throws kInvalidInput for an unknown name.
  const ParamInfo& find(const std::string& name) const;
};

ParameterLayout parameter_layout(const ModelConfig& m);

/// CS336 initialisation: Linear weights ~ N(0, 2/(in+out)) truncated at 3
/// std, embeddings ~ N(0, 1) truncated at 3, RMSNorm weights 1. Seeded: each
/// block of 2^20 values of a tensor draws from a stream of its own (seed,
/// tensor, block), filled on every core; the values do not depend on the
/// core count.
template <class T>
void init_parameters(const ParameterLayout& layout, T* data, std::uint64_t seed);

}  // namespace ktune::model
