// The Transformer's step as one walk over the op interface (see walk.hpp).
// The order of the ops, in-place uses and accumulations are the cpu
// backend's since it was written: its results do not depend on this walk.
#include "model/walk.hpp"

#include <fmt/format.h>

#include "base/error.hpp"
#include "model/nvtx.hpp"

namespace ktune::model {

std::string region_name(Region r) {
  static const char* const kNames[kRegionCount] = {"parameters", "gradients",    "exp_avg",   "exp_avg_sq",
                                                   "layers",     "final",        "workspace", "tokens",
                                                   "targets",    "bf16 weights", "scratch"};
  return kNames[static_cast<int>(r)];
}

namespace {

// y (n, out) = x (n, in) W^T, W (out, in).
void linear(Ops& ops, Ref x, Ref w, Ref y, std::int64_t n, std::int64_t in, std::int64_t out) {
  ops.gemm({.trans_a = false, .trans_b = true, .m = n, .n = out, .k = in, .a = x, .b = w, .c = y, .lda = in,
            .ldb = in, .ldc = out});
}
// dx (n, in) = dy (n, out) W (+ dx when accumulate).
void linear_dx(Ops& ops, Ref dy, Ref w, Ref dx, std::int64_t n, std::int64_t in, std::int64_t out,
               bool accumulate = false) {
  ops.gemm({.trans_a = false, .trans_b = false, .m = n, .n = in, .k = out, .a = dy, .b = w, .c = dx, .lda = out,
            .ldb = in, .ldc = in, .beta = accumulate ? 1.0 : 0.0});
}
// dW (out, in) = dy^T (out, n) x (n, in) (+ dW when accumulate).
void linear_dw(Ops& ops, Ref dy, Ref x, Ref dw, std::int64_t n, std::int64_t in, std::int64_t out,
               bool accumulate) {
  ops.gemm({.trans_a = true, .trans_b = false, .m = out, .n = in, .k = n, .a = dy, .b = x, .c = dw, .lda = out,
            .ldb = in, .ldc = in, .beta = accumulate ? 1.0 : 0.0});
}

// The distance between consecutive refs of one region, which must be the
// same between each pair: the batch stride of a GEMM over them.
std::int64_t spacing(const std::vector<Ref>& refs) {
  const std::int64_t step = refs[1].offset - refs[0].offset;
  for (std::size_t i = 1; i < refs.size(); ++i)
    KTUNE_REQUIRE(refs[i].region == refs[0].region && refs[i].offset - refs[i - 1].offset == step,
                  "a batched projection's operands must be evenly spaced in one region");
  return step;
}

// y_i (n, out) = x (n, in) W_i^T for each weight W_i: one GEMM batched over
// them (L.batched_projections), else one GEMM each.
void linears(Ops& ops, const StepLayout& L, Ref x, const std::vector<Ref>& w, const std::vector<Ref>& y,
             std::int64_t n, std::int64_t in, std::int64_t out) {
  if (!L.batched_projections) {
    for (std::size_t i = 0; i < w.size(); ++i) linear(ops, x, w[i], y[i], n, in, out);
    return;
  }
  ops.gemm({.trans_a = false, .trans_b = true, .m = n, .n = out, .k = in, .a = x, .b = w[0], .c = y[0], .lda = in,
            .ldb = in, .ldc = out, .batch = static_cast<std::int64_t>(w.size()), .stride_a = 0,
            .stride_b = spacing(w), .stride_c = spacing(y)});
}
// dW_i (out, in) = dy_i^T x for each dy_i (+ dW_i when accumulate), batched like `linears`.
void linear_dws(Ops& ops, const StepLayout& L, const std::vector<Ref>& dy, Ref x, const std::vector<Ref>& dw,
                std::int64_t n, std::int64_t in, std::int64_t out, bool accumulate) {
  if (!L.batched_projections) {
    for (std::size_t i = 0; i < dy.size(); ++i) linear_dw(ops, dy[i], x, dw[i], n, in, out, accumulate);
    return;
  }
  ops.gemm({.trans_a = true, .trans_b = false, .m = out, .n = in, .k = n, .a = dy[0], .b = x, .c = dw[0],
            .lda = out, .ldb = in, .ldc = in, .beta = accumulate ? 1.0 : 0.0,
            .batch = static_cast<std::int64_t>(dy.size()), .stride_a = spacing(dy), .stride_b = 0,
            .stride_c = spacing(dw)});
}

Ref P(std::int64_t offset) { return {Region::kParams, offset}; }
Ref G(std::int64_t offset) { return {Region::kGrads, offset}; }
Ref F(std::int64_t offset) { return {Region::kFinal, offset}; }
Ref W(std::int64_t offset) { return {Region::kWork, offset}; }

// Where a backward writes the gradients no GEMM writes (the embedding's,
// the norms'), which their ops overwrite: the parameter's gradient itself,
// or, when the backward accumulates, the workspace's dparam, added to it
// by the backward's accumulate(). The GEMMs accumulate with beta = 1.
struct GradTarget {
  bool accumulate = false;
  Ref dparam;
  Ref at(std::int64_t offset) const { return accumulate ? dparam : G(offset); }
  void done(Ops& ops, std::int64_t offset, std::int64_t n) const {
    if (accumulate) ops.accumulate(dparam, G(offset), n);
  }
};

// Block l from its ln1 (rstd1 kept), which the walk wrote before it: the
// embedding's norm for block 0, else block l - 1's last op; up to the
// SwiGLU, every activation its backward reads (what a recomputing backward
// runs again). The attention branch's residual add runs with ln2, which
// reads its sum, as one op.
void forward_body(Ops& ops, const StepLayout& L, std::int64_t l) {
  const auto& c = L.config;
  const auto& ll = L.layer;
  const std::int64_t N = L.shape.tokens(), C = c.d_model, FF = c.d_ff;
  const std::int64_t H = c.heads, D = c.head_dim(), S = L.shape.context;
  const BlockParams& bp = L.params.blocks[l];
  const auto a = [&](std::int64_t offset) { return L.act(l, offset); };

  // Attention branch: x_mid = x_in + W_o attn(rope(W_q ln1), rope(W_k ln1), W_v ln1), then ln2 of it.
  const Ref cos = W(L.work.rope_cos), sin = W(L.work.rope_sin);
  if (L.fused_qkv) {  // (N, 3C) rows [q | k | v]: W_q, W_k, W_v stacked are one (3C, C) weight
    const Ref qkv = a(ll.q);
    linear(ops, a(ll.ln1), L.weight(bp.q), qkv, N, C, 3 * C);
    ops.rope_forward(qkv, cos, sin, N, S, 2 * H, D, 3 * C);  // q and k of a token: 2H heads side by side
    ops.attention_forward(qkv, qkv + C, qkv + 2 * C, a(ll.attn_saved), a(ll.attn), L.attention_shape(), 3 * C);
  } else {
    linears(ops, L, a(ll.ln1), {L.weight(bp.q), L.weight(bp.k), L.weight(bp.v)},
            {a(ll.q), a(ll.k), a(ll.v)}, N, C, C);  // (N, H, D) each
    if (L.paired_rope) {  // k follows q: token N + t is k's token t, at position t % S
      ops.rope_forward(a(ll.q), cos, sin, 2 * N, S, H, D, C);
    } else {
      ops.rope_forward(a(ll.q), cos, sin, N, S, H, D, C);
      ops.rope_forward(a(ll.k), cos, sin, N, S, H, D, C);
    }
    ops.attention_forward(a(ll.q), a(ll.k), a(ll.v), a(ll.attn_saved), a(ll.attn), L.attention_shape(), C);
  }
  linear(ops, a(ll.attn), L.weight(bp.o), a(ll.x_mid), N, C, C);
  ops.residual_rmsnorm_forward(a(ll.x_in), a(ll.x_mid), P(bp.ln2), a(ll.x_mid), a(ll.ln2), a(ll.rstd2), N,
                               C, c.norm_eps);

  // Feed-forward branch, up to h = silu(W1 ln2) * W3 ln2.
  linears(ops, L, a(ll.ln2), {L.weight(bp.w1), L.weight(bp.w3)}, {a(ll.a), a(ll.b)}, N, C, FF);  // (N, F) each
  ops.swiglu_forward(a(ll.a), a(ll.b), a(ll.h), N * FF);
}

// The rest of block l after forward_body: x_out = x_mid + W2 h, then the
// next block's ln1 of it, or the final norm, as one op.
void forward_tail(Ops& ops, const StepLayout& L, std::int64_t l) {
  const auto& c = L.config;
  const auto& ll = L.layer;
  const std::int64_t N = L.shape.tokens(), C = c.d_model, FF = c.d_ff;
  const BlockParams& bp = L.params.blocks[l];
  const auto a = [&](std::int64_t offset) { return L.act(l, offset); };
  // x_out is the next block's input (its own kept buffers when training;
  // this slot's x_in, no longer needed, when forward-only), or the final
  // stream; so is its norm (forward-only: over this block's ln1).
  const bool last = l + 1 == c.layers;
  const Ref next = last ? F(L.final.x) : L.act(l + 1, ll.x_in);
  linear(ops, a(ll.h), L.weight(bp.w2), next, N, FF, C);
  const Ref norm_w = last ? P(L.params.ln_final) : P(L.params.blocks[l + 1].ln1);
  const Ref norm_y = last ? F(L.final.ln) : L.act(l + 1, ll.ln1);
  const Ref norm_rstd = last ? F(L.final.rstd) : L.act(l + 1, ll.rstd1);
  ops.residual_rmsnorm_forward(a(ll.x_mid), next, norm_w, next, norm_y, norm_rstd, N, C, c.norm_eps);
}

// What block l did not keep (L.shape.recompute) from what it kept: h from
// W1 x and W3 x, or the block's forward up to h from its input and ln1.
void recompute_block(Ops& ops, const StepLayout& L, std::int64_t l) {
  const auto& ll = L.layer;
  switch (L.shape.recompute) {
    case Recompute::kNone:
      return;
    case Recompute::kSwiglu:
      ops.swiglu_forward(L.act(l, ll.a), L.act(l, ll.b), L.act(l, ll.h), L.shape.tokens() * L.config.d_ff);
      return;
    case Recompute::kBlocks:
      forward_body(ops, L, l);
      return;
  }
}

void backward_block(Ops& ops, const StepLayout& L, std::int64_t l, const GradTarget& g) {
  const auto& c = L.config;
  const auto& ll = L.layer;
  const auto& wl = L.work;
  const std::int64_t N = L.shape.tokens(), C = c.d_model, FF = c.d_ff;
  const std::int64_t H = c.heads, D = c.head_dim(), S = L.shape.context;
  const BlockParams& bp = L.params.blocks[l];
  const auto a = [&](std::int64_t offset) { return L.act(l, offset); };
  const Ref dx = W(wl.dx);  // (N, C) gradient of the block's output, then of its input

  // Feed-forward branch.
  const Ref dh = W(wl.dh);  // (N, F): dh, then da in place
  const Ref db = W(wl.db);  // (N, F)
  linear_dw(ops, dx, a(ll.h), G(bp.w2), N, FF, C, g.accumulate);
  linear_dx(ops, dx, L.weight(bp.w2), dh, N, FF, C);
  ops.swiglu_backward(a(ll.a), a(ll.b), dh, dh, db, N * FF);
  linear_dws(ops, L, {dh, db}, a(ll.ln2), {G(bp.w1), G(bp.w3)}, N, C, FF, g.accumulate);
  linear_dx(ops, dh, L.weight(bp.w1), W(wl.dtmp), N, C, FF);
  linear_dx(ops, db, L.weight(bp.w3), W(wl.dtmp), N, C, FF, true);
  // x_mid's gradient: the stream's (dx) plus ln2's, in place.
  ops.residual_rmsnorm_backward(a(ll.x_mid), P(bp.ln2), a(ll.rstd2), W(wl.dtmp), dx, dx, g.at(bp.ln2), N, C);
  g.done(ops, bp.ln2, C);

  // Attention branch.
  const Ref dattn = W(wl.dbranch);  // (N, C)
  linear_dw(ops, dx, a(ll.attn), G(bp.o), N, C, C, g.accumulate);
  linear_dx(ops, dx, L.weight(bp.o), dattn, N, C, C);
  const Ref cos = W(wl.rope_cos), sin = W(wl.rope_sin);
  if (L.fused_qkv) {  // dq, dk, dv as (N, 3C) rows, as the forward's q, k, v
    const Ref qkv = a(ll.q), dqkv = W(wl.dq);
    ops.attention_backward(qkv, qkv + C, qkv + 2 * C, a(ll.attn), a(ll.attn_saved), dattn, dqkv, dqkv + C,
                           dqkv + 2 * C, L.attention_shape(), 3 * C);
    ops.rope_backward(dqkv, cos, sin, N, S, 2 * H, D, 3 * C);
    linear_dw(ops, dqkv, a(ll.ln1), G(bp.q), N, C, 3 * C, g.accumulate);  // the stacked (3C, C) gradient
    linear_dx(ops, dqkv, L.weight(bp.q), W(wl.dtmp), N, C, 3 * C);  // one GEMM with K = 3C
  } else {
    const Ref dq = W(wl.dq), dk = W(wl.dk), dv = W(wl.dv);
    ops.attention_backward(a(ll.q), a(ll.k), a(ll.v), a(ll.attn), a(ll.attn_saved), dattn, dq, dk, dv,
                           L.attention_shape(), C);
    if (L.paired_rope) {  // dk follows dq
      ops.rope_backward(dq, cos, sin, 2 * N, S, H, D, C);
    } else {
      ops.rope_backward(dq, cos, sin, N, S, H, D, C);
      ops.rope_backward(dk, cos, sin, N, S, H, D, C);
    }
    linear_dws(ops, L, {dq, dk, dv}, a(ll.ln1), {G(bp.q), G(bp.k), G(bp.v)}, N, C, C, g.accumulate);
    linear_dx(ops, dq, L.weight(bp.q), W(wl.dtmp), N, C, C);
    linear_dx(ops, dk, L.weight(bp.k), W(wl.dtmp), N, C, C, true);
    linear_dx(ops, dv, L.weight(bp.v), W(wl.dtmp), N, C, C, true);
  }
  // x_in's gradient: the stream's plus ln1's (block 0's ln1 had no add
  // before it, but its input's gradient has the same two terms).
  ops.residual_rmsnorm_backward(a(ll.x_in), P(bp.ln1), a(ll.rstd1), W(wl.dtmp), dx, dx, g.at(bp.ln1), N, C);
  g.done(ops, bp.ln1, C);
}

}  // namespace

std::int64_t StepLayout::region_elements(Region r) const {
  switch (r) {
    case Region::kParams:
      return params.total;
    case Region::kGrads:
      return train ? params.total : 0;
    case Region::kExpAvg:
    case Region::kExpAvgSq:
      return optimizer ? params.total : 0;
    case Region::kLayers:
      return train ? (config.layers - 1) * layer.kept(shape.recompute) + layer.size : layer.size;
    case Region::kFinal:
      return final.size;
    case Region::kWork:
      return work.size;
    case Region::kTokens:
    case Region::kTargets:
      return shape.tokens();
    case Region::kWeightsBf16:
      return precision == Precision::kBf16 ? params.total : 0;
    case Region::kScratch:
      return 0;
  }
  return 0;
}

templates::attention::AttentionShape StepLayout::attention_shape() const {
  return {shape.batch, shape.context, config.heads, config.head_dim(), true};
}

StepLayout step_layout(const ModelConfig& config, const RunShape& shape, unsigned threads, Allocation allocation,
                       Precision precision, AttentionSaved attention) {
  config.validate();
  shape.validate();
  StepLayout L;
  L.config = config;
  L.shape = shape;
  L.train = allocation != Allocation::kForwardOnly;
  L.optimizer = allocation == Allocation::kTrain;
  L.precision = precision;
  L.attention = attention;
  L.params = parameter_layout(config);
  L.layer = layer_layout(config, shape, attention, precision);
  L.final = final_layout(config, shape, precision);
  L.work = workspace_layout(config, shape, threads, L.train, precision);
  return L;
}

void walk_init(Ops& ops, const StepLayout& L) {
  ops.rope_tables(W(L.work.rope_cos), W(L.work.rope_sin), L.shape.context, L.config.head_dim(),
                  L.config.rope_theta);
}

double walk_forward(Ops& ops, const StepLayout& L) {
  walk_forward_ops(ops, L);
  return walk_loss(ops, L);
}

void walk_forward_ops(Ops& ops, const StepLayout& L) {
  const auto& c = L.config;
  const auto& fl = L.final;
  const std::int64_t N = L.shape.tokens(), C = c.d_model, V = c.vocab;
  const Ref tokens{Region::kTokens, 0}, targets{Region::kTargets, 0};
  const auto& ll = L.layer;
  ops.embedding_forward(tokens, L.weight(L.params.embedding), L.act(0, ll.x_in), N, C, V);  // (N, C)
  // The one norm with no residual add before it; the last block ends with the final norm.
  ops.rmsnorm_forward(L.act(0, ll.x_in), P(L.params.blocks[0].ln1), L.act(0, ll.ln1), L.act(0, ll.rstd1), N, C,
                      c.norm_eps);
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const NvtxRange range([&] { return fmt::format("block {} forward", l); });
    forward_body(ops, L, l);
    forward_tail(ops, L, l);
  }
  linear(ops, F(fl.ln), L.weight(L.params.lm_head), F(fl.logits), N, C, V);  // (N, V)
  ops.cross_entropy_forward(F(fl.logits), targets, F(fl.losses), F(fl.lse), N, V);
}

double walk_loss(Ops& ops, const StepLayout& L) { return ops.mean(F(L.final.losses), L.shape.tokens()); }

void walk_backward(Ops& ops, const StepLayout& L, bool accumulate) {
  KTUNE_REQUIRE(L.train, "backward needs a model built for gradients, not forward-only");
  KTUNE_REQUIRE(!accumulate || L.shape.micro_batches > 1,
                "a backward accumulates in a run of several micro-batches a step (RunShape::micro_batches)");
  const auto& c = L.config;
  const auto& fl = L.final;
  const auto& wl = L.work;
  const std::int64_t N = L.shape.tokens(), C = c.d_model, V = c.vocab;
  const GradTarget g{accumulate, W(wl.dparam)};
  const Ref tokens{Region::kTokens, 0}, targets{Region::kTargets, 0};
  const Ref dlogits = F(fl.logits);  // (N, V), in place over the logits
  ops.cross_entropy_backward(F(fl.logits), targets, F(fl.lse), dlogits, N, V, L.shape.step_tokens());
  linear_dw(ops, dlogits, F(fl.ln), G(L.params.lm_head), N, C, V, accumulate);
  linear_dx(ops, dlogits, L.weight(L.params.lm_head), W(wl.dtmp), N, C, V);
  ops.rmsnorm_backward(F(fl.x), P(L.params.ln_final), F(fl.rstd), W(wl.dtmp), W(wl.dx), g.at(L.params.ln_final), N,
                       C);
  g.done(ops, L.params.ln_final, C);
  for (std::int64_t l = c.layers - 1; l >= 0; --l) {
    const NvtxRange range([&] { return fmt::format("block {} backward", l); });
    // Recomputing, what block l did not keep is computed again into the
    // shared part of the slots, where the forward left the last block's.
    if (l + 1 < c.layers) recompute_block(ops, L, l);
    backward_block(ops, L, l, g);
  }
  ops.embedding_backward(tokens, W(wl.dx), g.at(L.params.embedding), N, C, V);  // (V, C)
  g.done(ops, L.params.embedding, V * C);
}

std::vector<AdamwTensor> adamw_tensors(const StepLayout& L) {
  std::vector<AdamwTensor> out;
  for (const auto& t : L.params.tensors)
    out.push_back({P(t.offset), G(t.offset), {Region::kExpAvg, t.offset}, {Region::kExpAvgSq, t.offset}, t.numel});
  return out;
}

void walk_adamw(Ops& ops, const StepLayout& L, const templates::adamw::AdamwHyper& hyper) {
  KTUNE_REQUIRE(L.optimizer, "an optimizer step needs a model built for training");
  ops.adamw_step(adamw_tensors(L), hyper);
}

}  // namespace ktune::model
