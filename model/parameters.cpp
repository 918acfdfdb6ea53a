// Parameter layout and initialisation (see parameters.hpp).
#include "model/parameters.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "base/error.hpp"
#include "model/parallel.hpp"

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

namespace {

// Values a random stream draws: blocks of a tensor, each from a stream of its
// own, so the blocks fill side by side and the values do not depend on the
// threads.
constexpr std::int64_t kInitBlock = std::int64_t{1} << 20;

// SplitMix64's finaliser: well-spread stream seeds from (seed, tensor, block).
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

template <class T>
void init_parameters(const ParameterLayout& layout, T* data, std::uint64_t seed) {
  struct Block {
    std::size_t tensor;
    std::int64_t begin, end;
  };
  std::vector<Block> blocks;
  for (std::size_t t = 0; t < layout.tensors.size(); ++t)
    for (std::int64_t b = 0; b < layout.tensors[t].numel; b += kInitBlock)
      blocks.push_back({t, b, std::min(b + kInitBlock, layout.tensors[t].numel)});
  Parallel parallel(std::max(1u, std::thread::hardware_concurrency()));
  parallel.for_range(static_cast<std::int64_t>(blocks.size()), [&](std::int64_t first, std::int64_t last, unsigned) {
    for (std::int64_t i = first; i < last; ++i) {
      const Block& block = blocks[static_cast<std::size_t>(i)];
      const ParamInfo& t = layout.tensors[block.tensor];
      T* p = data + t.offset;
      if (t.shape.size() == 1) {  // RMSNorm gains
        std::fill(p + block.begin, p + block.end, T(1));
        continue;
      }
      // Linear weights: std sqrt(2 / (in + out)); the embedding: 1.
      const double std = t.name == "token_embeddings.weight"
                             ? 1.0
                             : std::sqrt(2.0 / static_cast<double>(t.shape[0] + t.shape[1]));
      std::mt19937_64 rng(mix(mix(mix(seed) ^ block.tensor) ^ static_cast<std::uint64_t>(block.begin / kInitBlock)));
      std::normal_distribution<double> normal(0.0, 1.0);
      for (std::int64_t j = block.begin; j < block.end; ++j) {
        double z = normal(rng);
        while (std::abs(z) > 3.0) z = normal(rng);  // truncated at 3 std
        p[j] = static_cast<T>(z * std);
      }
    }
  });
}

template void init_parameters<float>(const ParameterLayout&, float*, std::uint64_t);
template void init_parameters<double>(const ParameterLayout&, double*, std::uint64_t);

}  // namespace ktune::model
