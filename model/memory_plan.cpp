// Buffer layouts and the memory plan (see memory_plan.hpp).
#include "model/memory_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "base/error.hpp"
#include "base/host_memory.hpp"
#include "templates/attention/reference.hpp"

namespace ktune::model {

namespace {

// Hands out consecutive offsets, each buffer starting at a multiple of
// kAlignElements: 64 bytes in fp32, 32 in bf16, so that every buffer is
// aligned for the kernels' widest (16-byte) vector accesses whatever the
// sizes before it (a (tokens,) buffer of an odd shape, say). It also counts
// the bytes of the buffers in bf16 mixed precision, where an activation (or
// its gradient) is bf16 and the rest fp32. A bf16 layout's offsets count
// 2-byte units (layout_unit_bytes): a bf16 buffer of n elements takes n
// units, an fp32 one 2n, so that the offsets are where the buffers lie.
constexpr std::int64_t kAlignElements = 16;
enum class Held { kActivation, kFp32 };
struct Cursor {
  bool bf16 = false;
  std::int64_t next = 0;
  std::int64_t bf16_bytes = 0;
  std::int64_t take(std::int64_t n, Held held = Held::kActivation) {
    const std::int64_t at = next;
    const std::int64_t aligned = (n + kAlignElements - 1) / kAlignElements * kAlignElements;
    const std::int64_t bytes = aligned * (held == Held::kActivation ? 2 : 4);
    next += bf16 ? bytes / 2 : aligned;
    bf16_bytes += bytes;
    return at;
  }
};

}  // namespace

std::int64_t LayerLayout::kept(Recompute recompute) const {
  switch (recompute) {
    case Recompute::kSwiglu:
      return h;
    case Recompute::kBlocks:
      return q;
    case Recompute::kNone:
      break;
  }
  return size;
}

std::int64_t attention_scratch_elements(const templates::attention::AttentionShape& s) {
  return std::min(kAttentionRowBlock, s.seq) * s.seq;
}

std::int64_t layout_unit_bytes(Precision precision) { return precision == Precision::kBf16 ? 2 : 4; }

LayerLayout layer_layout(const ModelConfig& m, const RunShape& r, AttentionSaved attention, Precision precision) {
  const std::int64_t N = r.tokens(), C = m.d_model, F = m.d_ff, S = r.context;
  Cursor c{.bf16 = precision == Precision::kBf16};
  LayerLayout l;
  l.x_in = c.take(N * C);
  l.ln1 = c.take(N * C);
  l.rstd1 = c.take(N, Held::kFp32);
  l.q = c.take(N * C);
  l.k = c.take(N * C);
  l.v = c.take(N * C);
  // bf16 probabilities (the softmax's output), or the fp32 log-sum-exp.
  if (attention == AttentionSaved::kLogSumExp)
    l.attn_saved = c.take(r.batch * m.heads * S, Held::kFp32);
  else
    l.attn_saved = c.take(r.batch * m.heads * S * S);
  l.attn = c.take(N * C);
  l.x_mid = c.take(N * C);
  l.ln2 = c.take(N * C);
  l.rstd2 = c.take(N, Held::kFp32);
  l.a = c.take(N * F);
  l.b = c.take(N * F);
  l.h = c.take(N * F);  // last: what Recompute::kSwiglu does not keep
  l.size = c.next;
  l.bf16_bytes = c.bf16_bytes;
  return l;
}

bool rope_pairs_adjacent(const ModelConfig& m, const RunShape& r, Precision precision, AttentionSaved attention) {
  const std::int64_t elements = r.tokens() * m.d_model;
  const LayerLayout l = layer_layout(m, r, attention, precision);
  const WorkspaceLayout w = workspace_layout(m, r, 1, true, precision);
  return l.k - l.q == elements && w.dk - w.dq == elements;
}

bool qkv_fusable(const ModelConfig& m, const RunShape& r, Precision precision, AttentionSaved attention) {
  const std::int64_t elements = r.tokens() * m.d_model;
  const std::int64_t element_bytes = precision == Precision::kBf16 ? 2 : 4;
  const LayerLayout l = layer_layout(m, r, attention, precision);
  const WorkspaceLayout w = workspace_layout(m, r, 1, true, precision);
  return attention == AttentionSaved::kLogSumExp && m.d_model * element_bytes % 16 == 0 &&
         l.k - l.q == elements && l.v - l.k == elements && w.dk - w.dq == elements && w.dv - w.dk == elements;
}

FinalLayout final_layout(const ModelConfig& m, const RunShape& r, Precision precision) {
  const std::int64_t N = r.tokens(), C = m.d_model;
  Cursor c{.bf16 = precision == Precision::kBf16};
  FinalLayout f;
  f.x = c.take(N * C);
  f.ln = c.take(N * C);
  f.rstd = c.take(N, Held::kFp32);
  f.logits = c.take(N * m.vocab);
  f.losses = c.take(N, Held::kFp32);
  f.lse = c.take(N, Held::kFp32);
  f.size = c.next;
  f.bf16_bytes = c.bf16_bytes;
  return f;
}

WorkspaceLayout workspace_layout(const ModelConfig& m, const RunShape& r, unsigned threads, bool backward,
                                 Precision precision) {
  const std::int64_t N = r.tokens(), C = m.d_model, F = m.d_ff;
  templates::attention::AttentionShape as{r.batch, r.context, m.heads, m.head_dim(), true};
  Cursor c{.bf16 = precision == Precision::kBf16};
  WorkspaceLayout w;
  w.rope_cos = c.take(r.context * m.head_dim() / 2, Held::kFp32);
  w.rope_sin = c.take(r.context * m.head_dim() / 2, Held::kFp32);
  if (backward) {
    w.attn_scratch = c.take(threads * attention_scratch_elements(as), Held::kFp32);
    w.dx = c.take(N * C);
    w.dtmp = c.take(N * C);
    w.dbranch = c.take(N * C);
    w.dq = c.take(N * C);
    w.dk = c.take(N * C);
    w.dv = c.take(N * C);
    w.dh = c.take(N * F);
    w.db = c.take(N * F);
    w.norm_dw = c.take(threads * C, Held::kFp32);
    if (r.micro_batches > 1) w.dparam = c.take(m.vocab * C, Held::kFp32);
  }
  w.size = c.next;
  w.bf16_bytes = c.bf16_bytes;
  return w;
}

MemoryPlan plan_memory(const ModelConfig& m, const RunShape& r, unsigned threads, std::int64_t element_bytes,
                       AttentionSaved attention, Precision precision) {
  m.validate();
  r.validate();
  {
    // A generous over-estimate of every buffer, in floating point: sizes whose
    // plan could wrap std::int64_t are refused before the exact sums below.
    using F = long double;
    const F N = F(r.batch) * r.context, C = m.d_model, FF = m.d_ff, S = r.context;
    const F per_layer = N * (16 * C + 4 * FF + 4) + F(r.batch) * m.heads * S * S + 4 * C * C + 3 * C * FF;
    const F elements = F(m.layers) * per_layer + N * (F(m.vocab) + 8 * C + 8) + 3 * F(m.vocab) * C +
                       F(threads) * (4 * S * (S + C) + C) + S * C;
    KTUNE_REQUIRE(elements * element_bytes * 8 < F(std::numeric_limits<std::int64_t>::max()),
                  fmt::format("model {} at context {}, batch {} would need more than 2^60 bytes; use a smaller "
                              "model, context or batch",
                              m.name, r.context, r.batch));
  }
  MemoryPlan p;
  p.model = m;
  p.shape = r;
  p.threads = threads;
  p.element_bytes = element_bytes;
  p.attention = attention;
  p.precision = precision;
  const bool bf16 = precision == Precision::kBf16;
  KTUNE_REQUIRE(!bf16 || element_bytes == 4, "a bf16 memory plan keeps fp32 master weights: element_bytes 4");
  const std::int64_t params = m.parameter_count();
  p.parameters = params * element_bytes;
  p.gradients = params * element_bytes;
  p.optimizer_state = 2 * params * element_bytes;
  p.weight_copy = bf16 ? 2 * params : 0;
  p.inputs = 2 * r.tokens() * 4;
  // Bytes of a layout: its dtypes' in bf16, element_bytes each otherwise.
  const auto bytes = [&](const auto& layout) { return bf16 ? layout.bf16_bytes : layout.size * element_bytes; };
  const std::int64_t layer = bytes(layer_layout(m, r, attention));
  const std::int64_t final = bytes(final_layout(m, r));
  p.per_layer_activations = layer;
  // A bf16 layout's units are 2 bytes; an f32 one's count element_bytes values.
  p.per_layer_kept = layer_layout(m, r, attention, precision).kept(r.recompute) * (bf16 ? 2 : element_bytes);
  p.activations_forward = layer + final;
  p.activations_backward = m.layers * p.per_layer_kept + (layer - p.per_layer_kept) + final;
  p.workspace_forward = bytes(workspace_layout(m, r, threads, false));
  p.workspace_backward = bytes(workspace_layout(m, r, threads, true));
  return p;
}

std::int64_t MemoryPlan::peak_forward() const {
  return parameters + weight_copy + inputs + activations_forward + workspace_forward;
}

std::int64_t MemoryPlan::peak_forward_backward() const {
  return parameters + weight_copy + gradients + inputs + activations_backward + workspace_backward;
}

std::int64_t MemoryPlan::peak_step() const { return peak_forward_backward() + optimizer_state; }

void require_host_memory(const MemoryPlan& plan, std::int64_t peak, const std::string& run) {
  ktune::require_host_memory(peak,
                             fmt::format("{} model {} at context {}, batch {}", run, plan.model.name,
                                         plan.shape.context, plan.shape.batch),
                             memory_remedy(plan, peak, available_host_memory()));
}

std::string memory_remedy(const MemoryPlan& plan, std::int64_t peak, std::int64_t available) {
  const std::string smaller = "a smaller model, context or batch";
  // Recomputing changes only the activations a backward keeps: a forward-only peak stays.
  if (peak == plan.peak_forward()) return "use " + smaller;
  for (const Recompute level : {Recompute::kSwiglu, Recompute::kBlocks}) {
    if (level <= plan.shape.recompute) continue;
    RunShape recomputing = plan.shape;
    recomputing.recompute = level;
    const MemoryPlan r =
        plan_memory(plan.model, recomputing, plan.threads, plan.element_bytes, plan.attention, plan.precision);
    const std::int64_t needed = peak - (plan.activations_backward - r.activations_backward);
    if (needed <= available)
      return fmt::format("use {} (activations recomputed in the backward: {} at this peak), or {}",
                         level == Recompute::kBlocks ? "--recompute" : "--recompute swiglu", format_bytes(needed),
                         smaller);
  }
  return "use " + smaller;
}

Recompute least_recompute(const std::function<MemoryPlan(Recompute)>& plan_at, std::int64_t available,
                          bool forward_backward) {
  if (available <= 0) return Recompute::kNone;
  for (const Recompute level : {Recompute::kNone, Recompute::kSwiglu}) {
    const MemoryPlan plan = plan_at(level);
    if ((forward_backward ? plan.peak_forward_backward() : plan.peak_step()) <= available) return level;
  }
  return Recompute::kBlocks;
}

std::string format_bytes(std::int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.1f} MiB", b / (1024.0 * 1024));
  if (b >= 1024.0) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{} B", bytes);
}

}  // namespace ktune::model
