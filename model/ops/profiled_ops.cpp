// Per-op times of the walk (see profiled_ops.hpp).
#include "model/ops/profiled_ops.hpp"

#include <fmt/format.h>

#include <chrono>

#include "base/error.hpp"
#include "model/step_kernels.hpp"
#include "templates/attention/attention.hpp"

namespace ktune::model {

void OpProfile::begin_step() {
  KTUNE_REQUIRE(!in_step_, "a profiled step began before the last one ended");
  in_step_ = true;
  for (auto& r : rows_) {
    r.device_ms.push_back(0);
    r.host_ms.push_back(0);
  }
}

void OpProfile::end_step() {
  KTUNE_REQUIRE(in_step_, "a profiled step ended without beginning");
  for (const auto& p : pending_) {
    rows_[p.row].device_ms.back() += clock_.elapsed_ms(*p.from, *p.to);
    rows_[p.row].host_ms.back() += p.host_ms;
  }
  // Calls and flops per step from the first step; every step of a walk issues the same.
  if (steps_ == 0)
    for (const auto& p : pending_) {
      ++rows_[p.row].calls;
      rows_[p.row].flops += p.flops;
    }
  pending_.clear();
  in_step_ = false;
  ++steps_;
}

void OpProfile::time(const std::string& phase, const std::string& op, const std::string& shape, double flops,
                     const std::function<void()>& call) {
  if (!in_step_) return call();  // outside a profiled step (the walk's set-up): untimed
  std::size_t row = 0;
  while (row < rows_.size() && !(rows_[row].phase == phase && rows_[row].op == op && rows_[row].shape == shape))
    ++row;
  if (row == rows_.size()) {
    // A row first seen in a later step has no time in the earlier ones.
    KTUNE_REQUIRE(steps_ == 0, fmt::format("{} {} ({}) ran in profiled step {} but not in the first", phase, op,
                                           shape, steps_ + 1));
    rows_.push_back({phase, op, shape, 0, 0, {0}, {0}});
  }
  Pending p{row, clock_.mark(), nullptr, 0, flops};
  const auto start = std::chrono::steady_clock::now();
  call();
  p.host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  p.to = clock_.mark();
  pending_.push_back(std::move(p));
}

namespace {

std::string rows_by(std::int64_t rows, std::int64_t dim) { return fmt::format("{}x{}", rows, dim); }

std::string attention(const templates::attention::AttentionShape& s) {
  return fmt::format("{}x{}x{}x{}{}", s.batch, s.heads, s.seq, s.head_dim, s.causal ? " causal" : "");
}

}  // namespace

void ProfiledOps::rope_tables(Ref cos, Ref sin, std::int64_t seq, std::int64_t head_dim, double theta) {
  time("rope_tables", rows_by(seq, head_dim / 2), [&] { inner_.rope_tables(cos, sin, seq, head_dim, theta); });
}

void ProfiledOps::gemm(const GemmOp& g) {
  std::string shape = fmt::format("{}x{}x{} {}{}", g.m, g.n, g.k, g.trans_a ? 'T' : 'N', g.trans_b ? 'T' : 'N');
  if (g.batch > 1) shape += fmt::format(" x{}", g.batch);
  if (g.beta != 0) shape += " +C";
  time("gemm", shape, [&] { inner_.gemm(g); }, 2.0 * static_cast<double>(g.m * g.n * g.k * g.batch));
}

void ProfiledOps::embedding_forward(Ref tokens, Ref table, Ref out, std::int64_t rows, std::int64_t dim,
                                    std::int64_t vocab) {
  time("embedding_forward", rows_by(rows, dim),
       [&] { inner_.embedding_forward(tokens, table, out, rows, dim, vocab); });
}

void ProfiledOps::embedding_backward(Ref tokens, Ref dout, Ref dtable, std::int64_t rows, std::int64_t dim,
                                     std::int64_t vocab) {
  time("embedding_backward", rows_by(rows, dim),
       [&] { inner_.embedding_backward(tokens, dout, dtable, rows, dim, vocab); });
}

void ProfiledOps::rmsnorm_forward(Ref x, Ref w, Ref y, Ref rstd, std::int64_t rows, std::int64_t dim, double eps) {
  time("rmsnorm_forward", rows_by(rows, dim), [&] { inner_.rmsnorm_forward(x, w, y, rstd, rows, dim, eps); });
}

void ProfiledOps::rmsnorm_backward(Ref x, Ref w, Ref rstd, Ref dy, Ref dx, Ref dw, std::int64_t rows,
                                   std::int64_t dim) {
  time("rmsnorm_backward", rows_by(rows, dim), [&] { inner_.rmsnorm_backward(x, w, rstd, dy, dx, dw, rows, dim); });
}

void ProfiledOps::residual_rmsnorm_forward(Ref x, Ref r, Ref w, Ref h, Ref y, Ref rstd, std::int64_t rows,
                                           std::int64_t dim, double eps) {
  time("residual_rmsnorm_forward", rows_by(rows, dim),
       [&] { inner_.residual_rmsnorm_forward(x, r, w, h, y, rstd, rows, dim, eps); });
}

void ProfiledOps::residual_rmsnorm_backward(Ref h, Ref w, Ref rstd, Ref dy, Ref dstream, Ref dh, Ref dw,
                                            std::int64_t rows, std::int64_t dim) {
  time("residual_rmsnorm_backward", rows_by(rows, dim),
       [&] { inner_.residual_rmsnorm_backward(h, w, rstd, dy, dstream, dh, dw, rows, dim); });
}

void ProfiledOps::rope_forward(Ref x, Ref cos, Ref sin, std::int64_t tokens, std::int64_t seq, std::int64_t heads,
                               std::int64_t head_dim, std::int64_t row_stride) {
  time("rope_forward", fmt::format("{}x{}x{}", tokens, heads, head_dim),
       [&] { inner_.rope_forward(x, cos, sin, tokens, seq, heads, head_dim, row_stride); });
}

void ProfiledOps::rope_backward(Ref dx, Ref cos, Ref sin, std::int64_t tokens, std::int64_t seq, std::int64_t heads,
                                std::int64_t head_dim, std::int64_t row_stride) {
  time("rope_backward", fmt::format("{}x{}x{}", tokens, heads, head_dim),
       [&] { inner_.rope_backward(dx, cos, sin, tokens, seq, heads, head_dim, row_stride); });
}

void ProfiledOps::attention_forward(Ref q, Ref k, Ref v, Ref saved, Ref out,
                                    const templates::attention::AttentionShape& s, std::int64_t qkv_row) {
  time("attention_forward", attention(s), [&] { inner_.attention_forward(q, k, v, saved, out, s, qkv_row); },
       templates::attention::forward_family().flops(flash_attention_problem(s, "f32")));
}

void ProfiledOps::attention_backward(Ref q, Ref k, Ref v, Ref out, Ref saved, Ref dout, Ref dq, Ref dk, Ref dv,
                                     const templates::attention::AttentionShape& s, std::int64_t qkv_row) {
  time("attention_backward", attention(s),
       [&] { inner_.attention_backward(q, k, v, out, saved, dout, dq, dk, dv, s, qkv_row); },
       templates::attention::backward_family().flops(flash_attention_problem(s, "f32")));
}

void ProfiledOps::swiglu_forward(Ref a, Ref b, Ref h, std::int64_t n) {
  time("swiglu_forward", std::to_string(n), [&] { inner_.swiglu_forward(a, b, h, n); });
}

void ProfiledOps::swiglu_backward(Ref a, Ref b, Ref dh, Ref da, Ref db, std::int64_t n) {
  time("swiglu_backward", std::to_string(n), [&] { inner_.swiglu_backward(a, b, dh, da, db, n); });
}

void ProfiledOps::cross_entropy_forward(Ref logits, Ref targets, Ref losses, Ref lse, std::int64_t rows,
                                        std::int64_t vocab) {
  time("cross_entropy_forward", rows_by(rows, vocab),
       [&] { inner_.cross_entropy_forward(logits, targets, losses, lse, rows, vocab); });
}

void ProfiledOps::cross_entropy_backward(Ref logits, Ref targets, Ref lse, Ref dlogits, std::int64_t rows,
                                         std::int64_t vocab, std::int64_t mean_over) {
  time("cross_entropy_backward", rows_by(rows, vocab),
       [&] { inner_.cross_entropy_backward(logits, targets, lse, dlogits, rows, vocab, mean_over); });
}

void ProfiledOps::accumulate(Ref x, Ref y, std::int64_t n) {
  time("accumulate", std::to_string(n), [&] { inner_.accumulate(x, y, n); });
}

double ProfiledOps::mean(Ref values, std::int64_t n) {
  double m = 0;
  time("mean", std::to_string(n), [&] { m = inner_.mean(values, n); });
  return m;
}

void ProfiledOps::adamw_step(const std::vector<AdamwTensor>& tensors, const templates::adamw::AdamwHyper& hyper) {
  std::int64_t numel = 0;
  for (const auto& t : tensors) numel += t.numel;
  time("adamw_step", fmt::format("{} tensors, {} values", tensors.size(), numel),
       [&] { inner_.adamw_step(tensors, hyper); });
}

}  // namespace ktune::model
