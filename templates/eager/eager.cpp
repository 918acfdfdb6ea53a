// The eager chains of the fused families (see eager.hpp), written with a
// small builder, and their resolution to launches.
#include "templates/eager/eager.hpp"

#include <fmt/format.h>

#include <cmath>
#include <functional>

#include "base/error.hpp"
#include "templates/cast/cast.hpp"
#include "templates/common/family_helpers.hpp"

namespace ktune::templates::eager {
namespace {

constexpr std::uint64_t kAlign = 256;  // each temporary starts on its own 256-byte boundary

/// Appends steps and temporaries to a Decomposition.
class Chain {
 public:
  Decomposition done() { return std::move(d_); }

  /// A new temporary of `n` elements.
  std::string temp(const std::string& name, DType dtype, std::int64_t n) {
    d_.temporaries.push_back({name, dtype, n});
    return name;
  }
  void unary(Unary op, const std::string& dtype, std::int64_t n, const std::string& x, const std::string& y,
             float alpha = 0.0f) {
    add(&unary_family(op), Problem{dtype, {{"n", n}}}, x, "", "", y, alpha);
  }
  /// y = x * the run-time scalar `scalar`.
  void scale_by(const std::string& scalar, const std::string& dtype, std::int64_t n, const std::string& x,
                const std::string& y) {
    add(&unary_family(Unary::kScale), Problem{dtype, {{"n", n}}}, x, "", "", y, 0.0f, scalar);
  }
  /// y (rows, cols), stacked (cols, cols) blocks: `fill` above each diagonal, in place.
  void causal_mask(const std::string& dtype, std::int64_t rows, std::int64_t cols, const std::string& y, float fill) {
    add(&causal_mask_family(), Problem{dtype, {{"rows", rows}, {"cols", cols}}}, "", "", "", y, fill);
  }
  /// y = softmax(x) over each row (one kernel: the softmax family unscaled, unmasked).
  void softmax(const std::string& dtype, std::int64_t rows, std::int64_t cols, const std::string& x,
               const std::string& y) {
    add(&softmax::forward_family(), row_softmax(dtype, rows, cols), x, "", "", y, 1.0f);
  }
  /// dx = y * (dy - sum(dy * y)) over each row (PyTorch's softmax backward, one kernel).
  void softmax_backward(const std::string& dtype, std::int64_t rows, std::int64_t cols, const std::string& y,
                        const std::string& dy, const std::string& dx) {
    add(&softmax::backward_family(), row_softmax(dtype, rows, cols), y, dy, "", dx, 1.0f);
  }
  /// y (rows, cols) = op(a, b (b_rows, b_cols)).
  void binary(Binary op, const std::string& dtype, std::int64_t rows, std::int64_t cols, std::int64_t b_rows,
              std::int64_t b_cols, const std::string& a, const std::string& b, const std::string& y) {
    add(&binary_family(op),
                        Problem{dtype, {{"rows", rows}, {"cols", cols}, {"b_rows", b_rows}, {"b_cols", b_cols}}}, a, b,
                        "", y);
  }
  void reduce(Reduce op, const std::string& dtype, std::int64_t rows, std::int64_t cols, const std::string& x,
              const std::string& y) {
    add(&row_reduce_family(op), Problem{dtype, {{"rows", rows}, {"cols", cols}}}, x, "", "", y);
  }
  void col_sum(const std::string& dtype, std::int64_t rows, std::int64_t cols, const std::string& x,
               const std::string& y) {
    add(&col_sum_family(), Problem{dtype, {{"rows", rows}, {"cols", cols}}}, x, "", "", y);
  }
  void gather(const std::string& dtype, std::int64_t rows, std::int64_t cols, const std::string& x,
              const std::string& idx, const std::string& y) {
    add(&gather_family(), Problem{dtype, {{"rows", rows}, {"cols", cols}}}, x, "", idx, y);
  }
  void scatter_add(const std::string& dtype, std::int64_t rows, std::int64_t cols, const std::string& y,
                   const std::string& idx, float alpha) {
    add(&scatter_add_family(), Problem{dtype, {{"rows", rows}, {"cols", cols}}}, "", "", idx, y,
                        alpha);
  }
  /// x (bf16) as fp32 in a new temporary.
  std::string to_f32(const std::string& x, std::int64_t n) {
    const std::string y = temp(x + "_f32", DType::kF32, n);
    add(&cast::to_f32_family(), Problem{"bf16", {{"n", n}}}, x, "", "", y);
    return y;
  }
  void to_bf16(const std::string& x, const std::string& y, std::int64_t n) {
    add(&cast::to_bf16_family(), Problem{"bf16", {{"n", n}}}, x, "", "", y);
  }

  /// y = op(a, b) over strided views of each (4-d index space `sizes`).
  void strided(Binary op, const std::string& dtype, const std::array<std::int64_t, 4>& sizes, const std::string& a,
               const View& av, const std::string& b, const View& bv, const std::string& y, const View& yv) {
    add(&strided_binary_family(op), strided_problem(dtype, sizes, av, bv, yv), a, b, "", y);
  }
  /// y (n,) = value.
  void fill(const std::string& dtype, std::int64_t n, const std::string& y, float value) {
    add(&fill_family(), Problem{dtype, {{"n", n}}}, "", "", "", y, value);
  }
  /// y (rows, cols) = the rows idx of x (table_rows, cols).
  void gather_rows(const std::string& dtype, std::int64_t rows, std::int64_t cols, std::int64_t table_rows,
                   const std::string& x, const std::string& idx, const std::string& y) {
    add(&gather_rows_family(),
                        Problem{dtype, {{"rows", rows}, {"cols", cols}, {"table_rows", table_rows}}}, x, "", idx, y);
  }
  /// y (table_rows, cols) rows idx += x (rows, cols), fp32.
  void index_add(std::int64_t rows, std::int64_t cols, std::int64_t table_rows, const std::string& x,
                 const std::string& idx, const std::string& y) {
    add(&index_add_family(),
                        Problem{"f32", {{"rows", rows}, {"cols", cols}, {"table_rows", table_rows}}}, x, "", idx, y);
  }
  /// y = a over strided views: stack, cat, contiguous().
  void strided_copy(const std::string& dtype, const std::array<std::int64_t, 4>& sizes, const std::string& a,
                    const View& av, const std::string& y, const View& yv) {
    add(&strided_copy_family(), strided_problem(dtype, sizes, av, std::nullopt, yv), a, "", "", y);
  }

 private:
  void add(const Family* family, Problem problem, std::string x, std::string b, std::string idx, std::string y,
           float alpha = 0.0f, std::string alpha_from = "") {
    d_.steps.push_back(Step{family, std::move(problem), std::move(x), std::move(b), std::move(idx), std::move(y), alpha,
                            std::move(alpha_from)});
  }
  static Problem row_softmax(const std::string& dtype, std::int64_t rows, std::int64_t cols) {
    return Problem{dtype, {{"rows", rows}, {"cols", cols}, {"causal", 0}}};
  }
  Decomposition d_;
};

// ---- the chains -------------------------------------------------------------------
// Names: the fused family's arguments as its workload names them; temporaries
// named for what they hold.

/// RMSNorm forward on `x` (rows, dim), as the model's eager code writes it:
/// x.float().pow(2).mean(-1) + eps, rsqrt, x * rstd, * w, .to(dtype).
void rmsnorm_forward_chain(Chain& c, bool bf16, std::int64_t rows, std::int64_t dim, const std::string& x_in,
                           const std::string& y_out) {
  const std::int64_t n = rows * dim;
  const std::string x = bf16 ? c.to_f32(x_in, n) : x_in;
  const std::string sq = c.temp("x_squared", DType::kF32, n);
  const std::string ms = c.temp("mean_square", DType::kF32, rows);
  const std::string ms_eps = c.temp("mean_square_eps", DType::kF32, rows);
  const std::string xn = c.temp("x_normed", DType::kF32, n);
  c.unary(Unary::kSquare, "f32", n, x, sq);
  c.reduce(Reduce::kMean, "f32", rows, dim, sq, ms);
  c.unary(Unary::kAddScalar, "f32", rows, ms, ms_eps, rmsnorm::kEps);
  c.unary(Unary::kRsqrt, "f32", rows, ms_eps, "rstd");
  c.binary(Binary::kMul, "f32", rows, dim, rows, 1, x, "rstd", xn);
  if (!bf16) {
    c.binary(Binary::kMul, "f32", rows, dim, 1, dim, xn, "w", y_out);
    return;
  }
  const std::string y = c.temp("y_f32", DType::kF32, n);
  c.binary(Binary::kMul, "f32", rows, dim, 1, dim, xn, "w", y);
  c.to_bf16(y, y_out, n);
}

/// The autograd backward of rmsnorm_forward_chain: dw, and dx in fp32 into `dx`.
void rmsnorm_backward_chain(Chain& c, bool bf16, std::int64_t rows, std::int64_t dim, const std::string& x_in,
                            const std::string& dx) {
  const std::int64_t n = rows * dim;
  const std::string x = bf16 ? c.to_f32(x_in, n) : x_in;
  const std::string dy = bf16 ? c.to_f32("dy", n) : "dy";
  const std::string xn = c.temp("x_normed", DType::kF32, n);
  const std::string dxn = c.temp("d_x_normed", DType::kF32, n);
  const std::string dy_xn = c.temp("dy_x_normed", DType::kF32, n);
  const std::string dx_direct = c.temp("dx_through_x", DType::kF32, n);
  const std::string dxn_x = c.temp("d_x_normed_x", DType::kF32, n);
  const std::string drstd = c.temp("d_rstd", DType::kF32, rows);
  const std::string dms = c.temp("d_mean_square", DType::kF32, rows);
  const std::string dsq = c.temp("d_x_squared", DType::kF32, rows);
  const std::string x_dsq = c.temp("x_d_x_squared", DType::kF32, n);
  const std::string dx_square = c.temp("dx_through_square", DType::kF32, n);
  c.binary(Binary::kMul, "f32", rows, dim, rows, 1, x, "rstd", xn);  // recomputed: autograd would have saved it
  c.binary(Binary::kMul, "f32", rows, dim, 1, dim, dy, "w", dxn);     // y = xn * w
  c.binary(Binary::kMul, "f32", rows, dim, rows, dim, dy, xn, dy_xn);
  c.col_sum("f32", rows, dim, dy_xn, "dw");
  c.binary(Binary::kMul, "f32", rows, dim, rows, 1, dxn, "rstd", dx_direct);  // xn = x * rstd
  c.binary(Binary::kMul, "f32", rows, dim, rows, dim, dxn, x, dxn_x);
  c.reduce(Reduce::kSum, "f32", rows, dim, dxn_x, drstd);
  c.binary(Binary::kRsqrtBackward, "f32", rows, 1, rows, 1, drstd, "rstd", dms);  // rstd = rsqrt(ms + eps)
  c.unary(Unary::kScale, "f32", rows, dms, dsq, 1.0f / static_cast<float>(dim));   // ms = mean(sq)
  c.binary(Binary::kMul, "f32", rows, dim, rows, 1, x, dsq, x_dsq);                // sq = x^2
  c.unary(Unary::kScale, "f32", n, x_dsq, dx_square, 2.0f);
  c.binary(Binary::kAdd, "f32", rows, dim, rows, dim, dx_direct, dx_square, dx);   // the two paths to x
}

Decomposition rmsnorm_fwd(const Problem& p) {
  Chain c;
  rmsnorm_forward_chain(c, is_bf16(p), p.dim("rows"), p.dim("dim"), "x", "y");
  return c.done();
}

Decomposition rmsnorm_bwd(const Problem& p) {
  Chain c;
  const bool bf16 = is_bf16(p);
  const std::int64_t n = p.dim("rows") * p.dim("dim");
  if (!bf16) {
    rmsnorm_backward_chain(c, false, p.dim("rows"), p.dim("dim"), "x", "dx");
    return c.done();
  }
  const std::string dx = c.temp("dx_f32", DType::kF32, n);
  rmsnorm_backward_chain(c, true, p.dim("rows"), p.dim("dim"), "x", dx);
  c.to_bf16(dx, "dx", n);
  return c.done();
}

Decomposition residual_rmsnorm_fwd(const Problem& p) {
  Chain c;
  const std::int64_t rows = p.dim("rows"), dim = p.dim("dim");
  c.binary(Binary::kAdd, p.dtype, rows, dim, rows, dim, "x", "r", "h");  // the residual add
  rmsnorm_forward_chain(c, is_bf16(p), rows, dim, "h", "y");
  return c.done();
}

Decomposition residual_rmsnorm_bwd(const Problem& p) {
  Chain c;
  const bool bf16 = is_bf16(p);
  const std::int64_t rows = p.dim("rows"), dim = p.dim("dim"), n = rows * dim;
  std::string dx = c.temp("dx_f32", DType::kF32, n);
  rmsnorm_backward_chain(c, bf16, rows, dim, "h", dx);
  if (bf16) {
    const std::string dx16 = c.temp("dx_bf16", DType::kBF16, n);
    c.to_bf16(dx, dx16, n);
    dx = dx16;
  }
  // Autograd accumulates the two gradients of h: through the norm and along the residual stream.
  c.binary(Binary::kAdd, p.dtype, rows, dim, rows, dim, "dstream", dx, "dh");
  return c.done();
}

Decomposition swiglu_fwd(const Problem& p) {
  Chain c;
  const std::int64_t n = p.dim("n");
  const std::string s = c.temp("silu_a", activation_dtype(p), n);
  c.unary(Unary::kSilu, p.dtype, n, "a", s);
  c.binary(Binary::kMul, p.dtype, 1, n, 1, n, s, "b", "h");
  return c.done();
}

Decomposition swiglu_bwd(const Problem& p) {
  Chain c;
  const std::int64_t n = p.dim("n");
  const std::string& dt = p.dtype;
  const std::string s = c.temp("silu_a", activation_dtype(p), n);
  const std::string ds = c.temp("d_silu_a", activation_dtype(p), n);
  c.unary(Unary::kSilu, dt, n, "a", s);  // recomputed: autograd would have saved it
  c.binary(Binary::kMul, dt, 1, n, 1, n, "dh", s, "db");
  c.binary(Binary::kMul, dt, 1, n, 1, n, "dh", "b", ds);
  c.binary(Binary::kSiluBackward, dt, 1, n, 1, n, ds, "a", "da");
  return c.done();
}

/// Cross-entropy as a naive eager loss: the row max, shifted exponentials,
/// their sum and log, then the target's logit gathered.
Decomposition cross_entropy_fwd(const Problem& p) {
  Chain c;
  const std::int64_t rows = p.dim("rows"), vocab = p.dim("vocab"), n = rows * vocab;
  const std::string x = is_bf16(p) ? c.to_f32("logits", n) : "logits";
  const std::string m = c.temp("row_max", DType::kF32, rows);
  const std::string z = c.temp("shifted", DType::kF32, n);
  const std::string e = c.temp("exp_shifted", DType::kF32, n);
  const std::string s = c.temp("sum_exp", DType::kF32, rows);
  const std::string ls = c.temp("log_sum_exp_shifted", DType::kF32, rows);
  const std::string g = c.temp("target_logit", DType::kF32, rows);
  c.reduce(Reduce::kMax, "f32", rows, vocab, x, m);
  c.binary(Binary::kSub, "f32", rows, vocab, rows, 1, x, m, z);
  c.unary(Unary::kExp, "f32", n, z, e);
  c.reduce(Reduce::kSum, "f32", rows, vocab, e, s);
  c.unary(Unary::kLog, "f32", rows, s, ls);
  c.binary(Binary::kAdd, "f32", rows, 1, rows, 1, ls, m, "lse");
  c.gather("f32", rows, vocab, x, "targets", g);
  c.binary(Binary::kSub, "f32", rows, 1, rows, 1, "lse", g, "losses");
  return c.done();
}

/// dlogits = (softmax - onehot(target)) * scale (1 / rows for the mean):
/// exp(x - lse), the one-hot subtracted by a scatter, then the scale.
Decomposition cross_entropy_bwd(const Problem& p) {
  Chain c;
  const std::int64_t rows = p.dim("rows"), vocab = p.dim("vocab"), n = rows * vocab;
  const std::string x = is_bf16(p) ? c.to_f32("logits", n) : "logits";
  const std::string z = c.temp("shifted", DType::kF32, n);
  const std::string prob = c.temp("softmax", DType::kF32, n);
  c.binary(Binary::kSub, "f32", rows, vocab, rows, 1, x, "lse", z);
  c.unary(Unary::kExp, "f32", n, z, prob);
  c.scatter_add("f32", rows, vocab, prob, "targets", -1.0f);
  if (!is_bf16(p)) {
    c.scale_by("scale", "f32", n, prob, "dlogits");
    return c.done();
  }
  const std::string d = c.temp("dlogits_f32", DType::kF32, n);
  c.scale_by("scale", "f32", n, prob, d);
  c.to_bf16(d, "dlogits", n);
  return c.done();
}

/// Attention's softmax as the reference model's eager code writes it:
/// scores * scale, masked_fill(-inf) above the diagonal when causal, then
/// torch.softmax. Runs in y (so y may be x).
Decomposition softmax_fwd(const Problem& p) {
  Chain c;
  const std::int64_t rows = p.dim("rows"), cols = p.dim("cols");
  c.scale_by("scale", p.dtype, rows * cols, "x", "y");
  if (p.dim("causal") == 1) c.causal_mask(p.dtype, rows, cols, "y", -INFINITY);
  c.softmax(p.dtype, rows, cols, "y", "y");
  return c.done();
}

/// The autograd backward of softmax_fwd's chain, in reverse: softmax's
/// backward, masked_fill's (0 where the mask filled), the scale's mul. Runs in
/// dx (so dx may be dy).
Decomposition softmax_bwd(const Problem& p) {
  Chain c;
  const std::int64_t rows = p.dim("rows"), cols = p.dim("cols");
  c.softmax_backward(p.dtype, rows, cols, "y", "dy", "dx");
  if (p.dim("causal") == 1) c.causal_mask(p.dtype, rows, cols, "dx", 0.0f);
  c.scale_by("scale", p.dtype, rows * cols, "dx", "dx");
  return c.done();
}

/// RoPE on interleaved pairs as the reference model's eager code writes it,
/// on fp32 `in` into fp32 `out` (tokens, heads, head_dim): x1 = x[..., 0::2]
/// and x2 = x[..., 1::2] are views (no launch) read by the strided
/// primitives, the tables (seq, head_dim / 2) broadcast over the batch and
/// the heads; then x1*cos, x2*sin, their difference, x1*sin, x2*cos, their
/// sum, and torch.stack(..., -1).flatten(-2), one copy interleaving the two.
/// `backward` rotates by the opposite angle (x1*cos + x2*sin, x2*cos -
/// x1*sin): the math of autograd's gradient in the same seven launches
/// (autograd itself adds sub's negation and each slice's zero-filled
/// slice_backward, so eager runs more). Every read of `in` comes before the
/// stack writes `out`, so out may be in. The views need whole sequences
/// (tokens laid out (batch, seq)): a last, partial sequence is a second pass.
void rope_chain(Chain& c, const Problem& p, bool backward, const std::string& in, const std::string& out) {
  const std::int64_t tokens = p.dim("tokens"), heads = p.dim("heads"), head_dim = p.dim("head_dim");
  const std::int64_t seq = p.dim("seq"), half = head_dim / 2;
  const std::int64_t full = tokens / seq, tail = tokens % seq;
  const std::int64_t most = (full > 0 ? full * seq : tail) * heads * half;  // elements of the larger pass
  const std::string cos_term = c.temp("cos_term", DType::kF32, most);
  const std::string sin_term = c.temp("sin_term", DType::kF32, most);
  const std::string rotated = c.temp("rotated_halves", DType::kF32, 2 * most);
  struct Pass {
    std::int64_t first_token, sequences, length;
  };
  std::vector<Pass> passes;
  if (full > 0) passes.push_back({0, full, seq});
  if (tail > 0) passes.push_back({full * seq, 1, tail});
  for (const Pass& pass : passes) {
    const std::array<std::int64_t, 4> sizes = {pass.sequences, pass.length, heads, half};
    const std::int64_t n = pass.sequences * pass.length * heads * half;
    const std::int64_t start = pass.first_token * heads * head_dim;
    const View x1{start, {seq * heads * head_dim, heads * head_dim, head_dim, 2}};
    const View x2{start + 1, x1.strides};
    const View table{0, {0, half, 0, 1}};  // position t % seq: the pass starts a sequence
    const View first{0, {pass.length * heads * half, heads * half, half, 1}};
    const View second{n, first.strides};
    c.strided(Binary::kMul, "f32", sizes, in, x1, "cos", table, cos_term, first);
    c.strided(Binary::kMul, "f32", sizes, in, x2, "sin", table, sin_term, first);
    c.strided(backward ? Binary::kAdd : Binary::kSub, "f32", sizes, cos_term, first, sin_term, first, rotated, first);
    c.strided(Binary::kMul, "f32", sizes, in, x1, "sin", table, sin_term, first);
    c.strided(Binary::kMul, "f32", sizes, in, x2, "cos", table, cos_term, first);
    if (backward)  // x2*cos - x1*sin
      c.strided(Binary::kSub, "f32", sizes, cos_term, first, sin_term, first, rotated, second);
    else  // x1*sin + x2*cos
      c.strided(Binary::kAdd, "f32", sizes, sin_term, first, cos_term, first, rotated, second);
    c.strided_copy("f32", {1, 1, 2, n}, rotated, View{0, {0, 0, n, 1}}, out, View{start, {0, 0, 1, 2}});
  }
}

Decomposition rope(const Problem& p, bool backward) {
  Chain c;
  const std::string in = backward ? "dy" : "x", out = backward ? "dx" : "y";
  const std::int64_t n = p.dim("tokens") * p.dim("heads") * p.dim("head_dim");
  if (!is_bf16(p)) {
    rope_chain(c, p, backward, in, out);
    return c.done();
  }
  // bf16 activations times fp32 tables promote to fp32: the chain runs in fp32 and casts back.
  const std::string in32 = c.to_f32(in, n);
  const std::string out32 = c.temp(out + "_f32", DType::kF32, n);
  rope_chain(c, p, backward, in32, out32);
  c.to_bf16(out32, out, n);
  return c.done();
}
Decomposition rope_fwd(const Problem& p) { return rope(p, false); }
Decomposition rope_bwd(const Problem& p) { return rope(p, true); }

/// The token embedding: one index_select of the table's rows (bf16 tables
/// stay bf16, as the model's bf16 copy of the weights).
Decomposition embedding_fwd(const Problem& p) {
  Chain c;
  c.gather_rows(p.dtype, p.dim("rows"), p.dim("dim"), p.dim("vocab"), "table", "tokens", "out");
  return c.done();
}

/// embedding_dense_backward as a zero fill of d_table and an index_add_ of
/// d_out's rows (fp32 atomics: PyTorch's CUDA kernel sorts the tokens for a
/// deterministic sum instead, in more launches; the sums agree up to the
/// order of their terms). bf16 d_out is cast to fp32 first, as the gradient
/// of fp32 master weights.
Decomposition embedding_bwd(const Problem& p) {
  Chain c;
  const std::int64_t rows = p.dim("rows"), dim = p.dim("dim"), vocab = p.dim("vocab");
  const std::string d_out = is_bf16(p) ? c.to_f32("d_out", rows * dim) : "d_out";
  c.fill("f32", vocab * dim, "d_table", 0.0f);
  c.index_add(rows, dim, vocab, d_out, "tokens", "d_table");
  return c.done();
}

/// A fused family's chain, and its workload's bindings.
struct Decomposer {
  std::function<Decomposition(const Problem&)> decompose;
  std::function<Bindings(const Problem&, const std::vector<std::uint64_t>&)> bind_workload;
};

/// The Decomposer of `chain` for the typed family `fused`.
template <class FamilyT>
Decomposer decomposer(Decomposition (*chain)(const Problem&), const FamilyT& fused) {
  return {chain, [&fused](const Problem& p, const std::vector<std::uint64_t>& a) { return bind(fused.args_of(p, a)); }};
}

const std::map<std::string, Decomposer>& decomposers() {
  static const std::map<std::string, Decomposer> all = {
      {"rmsnorm_fwd", decomposer(rmsnorm_fwd, rmsnorm::forward_family())},
      {"rmsnorm_bwd", decomposer(rmsnorm_bwd, rmsnorm::backward_family())},
      {"residual_rmsnorm_fwd", decomposer(residual_rmsnorm_fwd, rmsnorm::residual_forward_family())},
      {"residual_rmsnorm_bwd", decomposer(residual_rmsnorm_bwd, rmsnorm::residual_backward_family())},
      {"swiglu_fwd", decomposer(swiglu_fwd, swiglu::forward_family())},
      {"swiglu_bwd", decomposer(swiglu_bwd, swiglu::backward_family())},
      {"cross_entropy_fwd", decomposer(cross_entropy_fwd, cross_entropy::forward_family())},
      {"cross_entropy_bwd", decomposer(cross_entropy_bwd, cross_entropy::backward_family())},
      {"softmax_fwd", decomposer(softmax_fwd, softmax::forward_family())},
      {"softmax_bwd", decomposer(softmax_bwd, softmax::backward_family())},
      {"rope_fwd", decomposer(rope_fwd, rope::forward_family())},
      {"rope_bwd", decomposer(rope_bwd, rope::backward_family())},
      {"embedding_fwd", decomposer(embedding_fwd, embedding::forward_family())},
      {"embedding_bwd", decomposer(embedding_bwd, embedding::backward_family())},
  };
  return all;
}

/// The decomposer of `family`; throws kInvalidInput listing those with one.
const Decomposer& find_decomposer(const std::string& family) {
  const auto it = decomposers().find(family);
  if (it == decomposers().end()) {
    std::string known;
    for (const auto& [n, d] : decomposers()) known += (known.empty() ? "" : ", ") + n;
    throw_error(ErrorKind::kInvalidInput,
                fmt::format("no eager decomposition of '{}'; families with one: {}", family, known));
  }
  return it->second;
}

std::uint64_t aligned(std::uint64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

}  // namespace

std::vector<std::string> decomposed_families() {
  std::vector<std::string> names;
  for (const auto& [name, f] : decomposers()) names.push_back(name);
  return names;
}

Decomposition decompose(const std::string& family, const Problem& problem) {
  const Decomposer& d = find_decomposer(family);
  find_family(family).check_problem(problem);
  return d.decompose(problem);
}

Bindings bind_workload(const std::string& family, const Problem& problem, const std::vector<std::uint64_t>& addresses) {
  return find_decomposer(family).bind_workload(problem, addresses);
}

std::size_t temporaries_bytes(const std::string& family, const Problem& problem) {
  std::uint64_t bytes = 0;
  for (const auto& t : decompose(family, problem).temporaries)
    bytes += aligned(static_cast<std::uint64_t>(t.elements) * size_of(t.dtype));
  return static_cast<std::size_t>(bytes);
}

EagerPlan plan(const std::string& family, const Problem& problem, const Bindings& args, std::uint64_t temporaries,
               const DeviceLimits& device) {
  return plan(family, decompose(family, problem), args, temporaries, device);
}

EagerPlan plan(const std::string& family, const Decomposition& d, const Bindings& args, std::uint64_t temporaries,
               const DeviceLimits& device) {
  Bindings at = args;
  std::uint64_t offset = 0;
  for (const auto& t : d.temporaries) {
    KTUNE_REQUIRE(temporaries != 0, fmt::format("eager {}: no temporaries given; the chain needs some", family));
    at[t.name] = temporaries + offset;
    offset += aligned(static_cast<std::uint64_t>(t.elements) * size_of(t.dtype));
  }
  auto address = [&](const std::string& name) -> std::uint64_t {
    if (name.empty()) return 0;
    const auto it = at.find(name);
    KTUNE_REQUIRE(it != at.end() && it->second != 0,
                  fmt::format("eager {}: buffer '{}' is not bound; bind every buffer of {}'s workload", family, name,
                              family));
    return it->second;
  };
  auto scalar = [&](const Step& s) -> float {
    if (s.alpha_from.empty()) return s.alpha;
    const auto it = args.scalars.find(s.alpha_from);
    KTUNE_REQUIRE(it != args.scalars.end(),
                  fmt::format("eager {}: scalar '{}' is not bound; bind {}'s Args", family, s.alpha_from, family));
    return it->second;
  };
  EagerPlan out;
  out.temporaries_bytes = static_cast<std::size_t>(offset);
  for (const Step& s : d.steps) {
    EagerStep e{s.family, s.family->default_config(s.problem), s.problem, {}};
    if (const auto* prim = dynamic_cast<const PrimitiveFamily*>(s.family))
      e.launches = prim->plan(e.config, s.problem,
                              PrimArgs{.x = address(s.x), .b = address(s.b), .idx = address(s.idx), .y = address(s.y),
                                       .alpha = scalar(s)},
                              device);
    else if (const auto* fwd = dynamic_cast<const softmax::ForwardFamily*>(s.family))
      e.launches = fwd->plan(e.config, s.problem,
                             softmax::ForwardArgs{.x = address(s.x), .y = address(s.y), .scale = scalar(s)}, device);
    else if (const auto* bwd = dynamic_cast<const softmax::BackwardFamily*>(s.family))
      e.launches = bwd->plan(
          e.config, s.problem,
          softmax::BackwardArgs{.y = address(s.x), .dy = address(s.b), .dx = address(s.y), .scale = scalar(s)},
          device);
    else
      e.launches = dynamic_cast<const cast::CastFamily&>(*s.family)
                       .plan(e.config, s.problem, cast::Args{.x = address(s.x), .y = address(s.y)}, device);
    out.steps.push_back(std::move(e));
  }
  return out;
}

Bindings bind(const rmsnorm::ForwardArgs& a) { return {{"x", a.x}, {"w", a.w}, {"y", a.y}, {"rstd", a.rstd}}; }
Bindings bind(const rmsnorm::BackwardArgs& a) {
  return {{"x", a.x}, {"w", a.w}, {"rstd", a.rstd}, {"dy", a.dy}, {"dx", a.dx}, {"dw", a.dw}};
}
Bindings bind(const rmsnorm::ResidualForwardArgs& a) {
  return {{"x", a.x}, {"r", a.r}, {"w", a.w}, {"h", a.h}, {"y", a.y}, {"rstd", a.rstd}};
}
Bindings bind(const rmsnorm::ResidualBackwardArgs& a) {
  return {{"h", a.h}, {"w", a.w}, {"rstd", a.rstd}, {"dy", a.dy}, {"dstream", a.dstream}, {"dh", a.dh}, {"dw", a.dw}};
}
Bindings bind(const swiglu::ForwardArgs& a) { return {{"a", a.a}, {"b", a.b}, {"h", a.h}}; }
Bindings bind(const swiglu::BackwardArgs& a) {
  return {{"a", a.a}, {"b", a.b}, {"dh", a.dh}, {"da", a.da}, {"db", a.db}};
}
Bindings bind(const cross_entropy::ForwardArgs& a) {
  return {{"logits", a.logits}, {"targets", a.targets}, {"losses", a.losses}, {"lse", a.lse}};
}
Bindings bind(const cross_entropy::BackwardArgs& a) {
  Bindings b{{"logits", a.logits}, {"targets", a.targets}, {"lse", a.lse}, {"dlogits", a.dlogits}};
  b.scalars["scale"] = a.scale;
  return b;
}
Bindings bind(const softmax::ForwardArgs& a) {
  Bindings b{{"x", a.x}, {"y", a.y}};
  b.scalars["scale"] = a.scale;
  return b;
}
Bindings bind(const embedding::ForwardArgs& a) { return {{"tokens", a.tokens}, {"table", a.table}, {"out", a.out}}; }
Bindings bind(const embedding::BackwardArgs& a) {
  return {{"tokens", a.tokens}, {"d_out", a.d_out}, {"d_table", a.d_table}};  // the workspace is the fused kernel's
}
Bindings bind(const rope::ForwardArgs& a) { return {{"x", a.x}, {"cos", a.cos}, {"sin", a.sin}, {"y", a.y}}; }
Bindings bind(const rope::BackwardArgs& a) { return {{"dy", a.dy}, {"cos", a.cos}, {"sin", a.sin}, {"dx", a.dx}}; }
Bindings bind(const softmax::BackwardArgs& a) {
  Bindings b{{"y", a.y}, {"dy", a.dy}, {"dx", a.dx}};
  b.scalars["scale"] = a.scale;
  return b;
}

}  // namespace ktune::templates::eager
