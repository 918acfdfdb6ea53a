// Parameter layout and initialisation (see parameters.hpp).
#include "model/parameters.hpp"

#include <fmt/format.h>

#include <cmath>
#include <random>

#include "base/error.hpp"

namespace ktune::model {

const ParamInfo& ParameterLayout::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return t;
  throw_error(ErrorKind::kInvalidInput, fmt::format("the model has no parameter named '{}'", name));
}

ParameterLayout parameter_layout(const ModelConfig& m) {
  m.validate();
  ParameterLayout p;
  const std::int64_t C = m.d_model, F = m.d_ff, V = m.vocab;
  auto add = [&p](std::string name, std::vector<std::int64_t> shape) {
    std::int64_t numel = 1;
    for (auto d : shape) numel *= d;
    p.tensors.push_back({std::move(name), std::move(shape), p.total, numel});
    p.total += numel;
    return p.tensors.back().offset;
  };
  p.embedding = add("token_embeddings.weight", {V, C});
  for (std::int64_t l = 0; l < m.layers; ++l) {
    const std::string pre = fmt::format("layers.{}.", l);
    BlockParams b;
    b.q = add(pre + "attn.q_proj.weight", {C, C});
    b.k = add(pre + "attn.k_proj.weight", {C, C});
    b.v = add(pre + "attn.v_proj.weight", {C, C});
    b.o = add(pre + "attn.output_proj.weight", {C, C});
    b.ln1 = add(pre + "ln1.weight", {C});
    b.w1 = add(pre + "ffn.w1.weight", {F, C});
    b.w2 = add(pre + "ffn.w2.weight", {C, F});
    b.w3 = add(pre + "ffn.w3.weight", {F, C});
    b.ln2 = add(pre + "ln2.weight", {C});
    p.blocks.push_back(b);
  }
  p.ln_final = add("ln_final.weight", {C});
  p.lm_head = add("lm_head.weight", {V, C});
  return p;
}

template <class T>
void init_parameters(const ParameterLayout& layout, T* data, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto truncated = [&](double std) {
    for (;;) {
      const double z = normal(rng);
      if (std::abs(z) <= 3.0) return static_cast<T>(z * std);
    }
  };
  for (const auto& t : layout.tensors) {
    T* p = data + t.offset;
    if (t.shape.size() == 1) {  // RMSNorm gains
      for (std::int64_t i = 0; i < t.numel; ++i) p[i] = T(1);
    } else if (t.name == "token_embeddings.weight") {
      for (std::int64_t i = 0; i < t.numel; ++i) p[i] = truncated(1.0);
    } else {
      const double std = std::sqrt(2.0 / static_cast<double>(t.shape[0] + t.shape[1]));
      for (std::int64_t i = 0; i < t.numel; ++i) p[i] = truncated(std);
    }
  }
}

template void init_parameters<float>(const ParameterLayout&, float*, std::uint64_t);
template void init_parameters<double>(const ParameterLayout&, double*, std::uint64_t);

}  // namespace ktune::model
