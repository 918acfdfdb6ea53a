// Buffer layouts and the memory plan (see memory_plan.hpp).
#include "model/memory_plan.hpp"

#include <fmt/format.h>

#include <limits>

#include "base/error.hpp"
#include "base/host_memory.hpp"
#include "templates/attention/reference.hpp"

namespace ktune::model {

namespace {

// Hands out consecutive offsets, each buffer starting at a multiple of
// kAlignElements: 64 bytes in fp32, 32 in bf16, so that every buffer is
// aligned for the kernels' widest (16-byte) vector accesses whatever the
// sizes before it (a (tokens,) buffer of an odd shape, say).
constexpr std::int64_t kAlignElements = 16;
struct Cursor {
  std::int64_t next = 0;
  std::int64_t take(std::int64_t n) {
    const std::int64_t at = next;
    next = (next + n + kAlignElements - 1) / kAlignElements * kAlignElements;
    return at;
  }
};

}  // namespace

LayerLayout layer_layout(const ModelConfig& m, const RunShape& r, AttentionSaved attention) {
  const std::int64_t N = r.tokens(), C = m.d_model, F = m.d_ff, S = r.context;
  Cursor c;
  LayerLayout l;
  l.x_in = c.take(N * C);
  l.ln1 = c.take(N * C);
  l.rstd1 = c.take(N);
  l.q = c.take(N * C);
  l.k = c.take(N * C);
  l.v = c.take(N * C);
  l.attn_saved = c.take(r.batch * m.heads * S * (attention == AttentionSaved::kLogSumExp ? 1 : S));
  l.attn = c.take(N * C);
  l.x_mid = c.take(N * C);
  l.ln2 = c.take(N * C);
  l.rstd2 = c.take(N);
  l.a = c.take(N * F);
  l.b = c.take(N * F);
  l.h = c.take(N * F);
  l.size = c.next;
  return l;
}

FinalLayout final_layout(const ModelConfig& m, const RunShape& r) {
  const std::int64_t N = r.tokens(), C = m.d_model;
  Cursor c;
  FinalLayout f;
  f.x = c.take(N * C);
  f.ln = c.take(N * C);
  f.rstd = c.take(N);
  f.logits = c.take(N * m.vocab);
  f.losses = c.take(N);
  f.lse = c.take(N);
  f.size = c.next;
  return f;
}

WorkspaceLayout workspace_layout(const ModelConfig& m, const RunShape& r, unsigned threads, bool backward) {
  const std::int64_t N = r.tokens(), C = m.d_model, F = m.d_ff;
  templates::attention::AttentionShape as{r.batch, r.context, m.heads, m.head_dim(), true};
  Cursor c;
  WorkspaceLayout w;
  w.rope_cos = c.take(r.context * m.head_dim() / 2);
  w.rope_sin = c.take(r.context * m.head_dim() / 2);
  w.attn_scratch = c.take(threads * templates::attention::scratch_elements(as));
  if (backward) {
    w.dx = c.take(N * C);
    w.dtmp = c.take(N * C);
    w.dbranch = c.take(N * C);
    w.dq = c.take(N * C);
    w.dk = c.take(N * C);
    w.dv = c.take(N * C);
    w.dh = c.take(N * F);
    w.db = c.take(N * F);
    w.norm_dw = c.take(threads * C);
  }
  w.size = c.next;
  return w;
}

MemoryPlan plan_memory(const ModelConfig& m, const RunShape& r, unsigned threads, std::int64_t element_bytes,
                       AttentionSaved attention) {
  m.validate();
  r.validate();
  {
    // A generous over-estimate of every buffer, in floating point: sizes whose
    // plan could wrap std::int64_t are refused before the exact sums below.
    using F = long double;
    const F N = F(r.batch) * r.context, C = m.d_model, FF = m.d_ff, S = r.context;
    const F per_layer = N * (16 * C + 4 * FF + 4) + F(r.batch) * m.heads * S * S + 4 * C * C + 3 * C * FF;
    const F elements = F(m.layers) * per_layer + N * (F(m.vocab) + 8 * C + 8) + 2 * F(m.vocab) * C +
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
  const std::int64_t params = m.parameter_count();
  p.parameters = params * element_bytes;
  p.gradients = params * element_bytes;
  p.optimizer_state = 2 * params * element_bytes;
  p.inputs = 2 * r.tokens() * 4;
  const std::int64_t layer = layer_layout(m, r, attention).size;
  const std::int64_t final = final_layout(m, r).size;
  p.per_layer_activations = layer * element_bytes;
  p.activations_forward = (layer + final) * element_bytes;
  p.activations_backward = (m.layers * layer + final) * element_bytes;
  p.workspace_forward = workspace_layout(m, r, threads, false).size * element_bytes;
  p.workspace_backward = workspace_layout(m, r, threads, true).size * element_bytes;
  return p;
}

std::int64_t MemoryPlan::peak_forward() const {
  return parameters + inputs + activations_forward + workspace_forward;
}

std::int64_t MemoryPlan::peak_forward_backward() const {
  return parameters + gradients + inputs + activations_backward + workspace_backward;
}

std::int64_t MemoryPlan::peak_step() const { return peak_forward_backward() + optimizer_state; }

void require_host_memory(const MemoryPlan& plan, std::int64_t peak, const std::string& run) {
  ktune::require_host_memory(peak, fmt::format("{} model {} at context {}, batch {}", run, plan.model.name,
                                               plan.shape.context, plan.shape.batch));
}

std::string format_bytes(std::int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.1f} MiB", b / (1024.0 * 1024));
  if (b >= 1024.0) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{} B", bytes);
}

}  // namespace ktune::model
