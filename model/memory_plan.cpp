// Buffer layouts and the memory plan (see memory_plan.hpp).
#include "model/memory_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "base/error.hpp"
#include "base/host_memory.hpp"
#include "model/parameters.hpp"
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
  LayoutListing* listing = nullptr;  // where each buffer is recorded, when asked
  std::int64_t next = 0;
  std::int64_t bf16_bytes = 0;
  std::int64_t take(const char* name, const char* what, std::vector<std::int64_t> shape,
                    Held held = Held::kActivation) {
    std::int64_t n = 1;
    for (const auto d : shape) n *= d;
    const std::int64_t at = next;
    const std::int64_t aligned = (n + kAlignElements - 1) / kAlignElements * kAlignElements;
    const std::int64_t bytes = aligned * (held == Held::kActivation ? 2 : 4);
    next += bf16 ? bytes / 2 : aligned;
    bf16_bytes += bytes;
    if (listing) listing->push_back({name, what, std::move(shape), held == Held::kFp32, aligned, at});
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

LayerLayout layer_layout(const ModelConfig& m, const RunShape& r, AttentionSaved attention, Precision precision,
                         LayoutListing* listing) {
  const std::int64_t N = r.tokens(), C = m.d_model, F = m.d_ff, S = r.context, H = m.heads, D = m.head_dim();
  Cursor c{.bf16 = precision == Precision::kBf16, .listing = listing};
  LayerLayout l;
  l.x_in = c.take("x_in", "residual stream into the block", {N, C});
  l.ln1 = c.take("ln1", "RMSNorm 1 output, q/k/v projections' input", {N, C});
  l.rstd1 = c.take("rstd1", "RMSNorm 1 reciprocal RMS", {N}, Held::kFp32);
  l.q = c.take("q", "queries after RoPE", {N, H, D});
  l.k = c.take("k", "keys after RoPE", {N, H, D});
  l.v = c.take("v", "values", {N, H, D});
  // bf16 probabilities (the softmax's output), or the fp32 log-sum-exp.
  if (attention == AttentionSaved::kLogSumExp)
    l.attn_saved = c.take("attn_saved", "attention's log-sum-exp, for its backward", {r.batch, H, S}, Held::kFp32);
  else
    l.attn_saved = c.take("attn_saved", "attention's probabilities, for its backward", {r.batch, H, S, S});
  l.attn = c.take("attn", "attention output, output projection's input", {N, C});
  l.x_mid = c.take("x_mid", "residual stream after attention", {N, C});
  l.ln2 = c.take("ln2", "RMSNorm 2 output, W1/W3's input", {N, C});
  l.rstd2 = c.take("rstd2", "RMSNorm 2 reciprocal RMS", {N}, Held::kFp32);
  l.a = c.take("a", "W1 x", {N, F});
  l.b = c.take("b", "W3 x", {N, F});
  l.h = c.take("h", "SwiGLU output silu(a) b, W2's input", {N, F});  // last: what Recompute::kSwiglu does not keep
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

FinalLayout final_layout(const ModelConfig& m, const RunShape& r, Precision precision, LayoutListing* listing) {
  const std::int64_t N = r.tokens(), C = m.d_model;
  Cursor c{.bf16 = precision == Precision::kBf16, .listing = listing};
  FinalLayout f;
  f.x = c.take("x", "residual stream after the last block", {N, C});
  f.ln = c.take("ln", "final RMSNorm output, the LM head's input", {N, C});
  f.rstd = c.take("rstd", "final RMSNorm reciprocal RMS", {N}, Held::kFp32);
  f.logits = c.take("logits", "logits, then their gradient", {N, m.vocab});
  f.losses = c.take("losses", "loss per token", {N}, Held::kFp32);
  f.lse = c.take("lse", "log-sum-exp per token, for the loss's backward", {N}, Held::kFp32);
  f.size = c.next;
  f.bf16_bytes = c.bf16_bytes;
  return f;
}

WorkspaceLayout workspace_layout(const ModelConfig& m, const RunShape& r, unsigned threads, bool backward,
                                 Precision precision, LayoutListing* listing) {
  const std::int64_t N = r.tokens(), C = m.d_model, F = m.d_ff, S = r.context, T = threads;
  templates::attention::AttentionShape as{r.batch, r.context, m.heads, m.head_dim(), true};
  Cursor c{.bf16 = precision == Precision::kBf16, .listing = listing};
  WorkspaceLayout w;
  w.rope_cos = c.take("rope_cos", "RoPE cosine table", {S, m.head_dim() / 2}, Held::kFp32);
  w.rope_sin = c.take("rope_sin", "RoPE sine table", {S, m.head_dim() / 2}, Held::kFp32);
  if (backward) {
    // The cpu backend's scratch (threads > 0): a device backend's plan (threads 0) keeps neither this nor norm_dw.
    if (T > 0)
      w.attn_scratch = c.take("attn_scratch", "cpu attention backward's dP block, per thread",
                              {T, attention_scratch_elements(as)}, Held::kFp32);
    w.dx = c.take("dx", "gradient of the residual stream", {N, C});
    w.dtmp = c.take("dtmp", "gradient at a norm's output", {N, C});
    w.dbranch = c.take("dbranch", "gradient of the attention output", {N, C});
    w.dq = c.take("dq", "gradient of q", {N, C});
    w.dk = c.take("dk", "gradient of k", {N, C});
    w.dv = c.take("dv", "gradient of v", {N, C});
    w.dh = c.take("dh", "gradient of h, then of a", {N, F});
    w.db = c.take("db", "gradient of b", {N, F});
    if (T > 0)
      w.norm_dw = c.take("norm_dw", "cpu RMSNorm weight gradients, per chunk of rows", {kNormDwChunks, C},
                         Held::kFp32);
    if (r.micro_batches > 1)
      w.dparam = c.take("dparam", "a micro-batch's embedding or norm gradient, before it is added", {m.vocab, C},
                        Held::kFp32);
  }
  w.size = c.next;
  w.bf16_bytes = c.bf16_bytes;
  return w;
}

namespace {
/// A device backend's materialised attention backward keeps every (batch, head)'s dS at once in its ops'
/// scratch, (B, H, S, S) of the activations' type (the cpu backend's takes a block of rows at a time, per thread,
/// in the workspace's attn_scratch): its bytes, 0 where there is none.
std::int64_t device_ds_bytes(const MemoryPlan& p) {
  if (p.threads != 0 || p.attention != AttentionSaved::kProbabilities) return 0;
  const std::int64_t context = p.shape.context;
  return p.shape.batch * p.model.heads * context * context *
         (p.precision == Precision::kBf16 ? 2 : p.element_bytes);
}
}  // namespace

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
  p.scratch = device_ds_bytes(p);
  return p;
}

std::vector<BufferRow> plan_buffers(const MemoryPlan& plan) {
  const ModelConfig& m = plan.model;
  const RunShape& r = plan.shape;
  const bool bf16 = plan.precision == Precision::kBf16;
  const std::string wide = plan.element_bytes == 8 ? "f64" : "f32";  // the plan's fp32 values
  std::vector<BufferRow> rows;
  // The parameter tensors, a block's named once with a count of the blocks.
  const ParameterLayout params = parameter_layout(m);
  for (const auto& t : params.tensors) {
    std::string name = t.name;
    if (name.rfind("layers.", 0) == 0) name = "layers.*" + name.substr(name.find('.', 7));
    const auto same = std::find_if(rows.begin(), rows.end(), [&](const BufferRow& b) { return b.name == name; });
    if (same != rows.end()) {
      ++same->count;
      continue;
    }
    rows.push_back({"parameters", name, bf16 ? "fp32 master weights" : "weights", t.shape, wide,
                    t.numel * plan.element_bytes, 1});
  }
  const std::int64_t P = params.total, N = r.tokens();
  if (bf16) rows.push_back({"bf16 weight copy", "param_bf16", "the weights the GEMMs read", {P}, "bf16", 2 * P, 1});
  rows.push_back({"gradients", "grad", "every parameter's gradient", {P}, wide, P * plan.element_bytes, 1});
  rows.push_back({"optimizer state", "exp_avg, exp_avg_sq", "AdamW's m and v", {P}, wide, P * plan.element_bytes, 2});
  rows.push_back({"inputs", "tokens, targets", "token ids, next-token targets", {N}, "int32", 4 * N, 2});
  // A listing's buffers below offset `kept` (in its units) one per block, the rest once.
  const auto add = [&](const char* phase, const LayoutListing& listing, std::int64_t kept) {
    for (const auto& b : listing)
      rows.push_back({phase, b.name, b.what, b.shape, bf16 && !b.fp32 ? "bf16" : wide,
                      b.aligned_elements * (bf16 ? (b.fp32 ? 4 : 2) : plan.element_bytes),
                      b.offset < kept ? m.layers : 1});
  };
  LayoutListing layer, final, workspace;
  // What each block keeps; the rest of the slot, recomputed in the backward, is shared.
  const std::int64_t kept = layer_layout(m, r, plan.attention, plan.precision, &layer).kept(r.recompute);
  add("activations, per block", layer, kept);
  final_layout(m, r, plan.precision, &final);
  add("activations after the blocks", final, 0);
  workspace_layout(m, r, plan.threads, true, plan.precision, &workspace);
  add("workspace", workspace, 0);
  const std::int64_t ds = device_ds_bytes(plan);
  const std::int64_t scratch = std::max(plan.scratch, plan.step_scratch);
  if (scratch > 0 && scratch == ds)
    rows.push_back({"ops' scratch", "ds", "the attention backward's dS", {r.batch, m.heads, r.context, r.context},
                    bf16 ? "bf16" : wide, scratch, 1});
  else if (scratch > 0)
    rows.push_back({"ops' scratch", "scratch",
                    ds > 0 ? "the attention backward's dS, the eager chains' temporaries, eager AdamW's"
                           : "the eager chains' temporaries, eager AdamW's",
                    {scratch}, "u8", scratch, 1});
  return rows;
}

std::int64_t MemoryPlan::peak_forward() const {
  return parameters + weight_copy + inputs + activations_forward + workspace_forward + forward_scratch;
}

std::int64_t MemoryPlan::peak_forward_backward() const {
  return parameters + weight_copy + gradients + inputs + activations_backward + workspace_backward + scratch;
}

std::int64_t MemoryPlan::peak_step() const {
  return peak_forward_backward() - scratch + std::max(scratch, step_scratch) + optimizer_state;
}

std::int64_t MemoryPlan::peak(Allocation allocation) const {
  switch (allocation) {
    case Allocation::kForwardOnly:
      return peak_forward();
    case Allocation::kGradients:
      return peak_forward_backward();
    case Allocation::kTrain:
      return peak_step();
  }
  return peak_step();
}

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
                          Allocation allocation) {
  if (available <= 0) return Recompute::kNone;
  for (const Recompute level : {Recompute::kNone, Recompute::kSwiglu})
    if (plan_at(level).peak(allocation) <= available) return level;
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
