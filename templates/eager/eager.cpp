// The eager chains of the fused families (see eager.hpp), written with a
// small builder, and their resolution to launches.
#include "templates/eager/eager.hpp"

#include <fmt/format.h>

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
    d_.steps.push_back({&unary_family(op), Problem{dtype, {{"n", n}}}, x, "", "", y, alpha});
  }
  /// y (rows, cols) = op(a, b (b_rows, b_cols)).
  void binary(Binary op, const std::string& dtype, std::int64_t rows, std::int64_t cols, std::int64_t b_rows,
              std::int64_t b_cols, const std::string& a, const std::string& b, const std::string& y) {
    d_.steps.push_back({&binary_family(op),
                        Problem{dtype, {{"rows", rows}, {"cols", cols}, {"b_rows", b_rows}, {"b_cols", b_cols}}}, a, b,
                        "", y});
  }
  void reduce(Reduce op, const std::string& dtype, std::int64_t rows, std::int64_t cols, const std::string& x,
              const std::string& y) {
    d_.steps.push_back({&row_reduce_family(op), Problem{dtype, {{"rows", rows}, {"cols", cols}}}, x, "", "", y});
  }
  void col_sum(const std::string& dtype, std::int64_t rows, std::int64_t cols, const std::string& x, const std::string& y) {
    d_.steps.push_back({&col_sum_family(), Problem{dtype, {{"rows", rows}, {"cols", cols}}}, x, "", "", y});
  }
  void gather(const std::string& dtype, std::int64_t rows, std::int64_t cols, const std::string& x, const std::string& idx,
              const std::string& y) {
    d_.steps.push_back({&gather_family(), Problem{dtype, {{"rows", rows}, {"cols", cols}}}, x, "", idx, y});
  }
  void scatter_add(const std::string& dtype, std::int64_t rows, std::int64_t cols, const std::string& y,
                   const std::string& idx, float alpha) {
    d_.steps.push_back({&scatter_add_family(), Problem{dtype, {{"rows", rows}, {"cols", cols}}}, "", "", idx, y,
                        alpha});
  }
  /// x (bf16) as fp32 in a new temporary.
  std::string to_f32(const std::string& x, std::int64_t n) {
    const std::string y = temp(x + "_f32", DType::kF32, n);
    d_.steps.push_back({&cast::to_f32_family(), Problem{"bf16", {{"n", n}}}, x, "", "", y});
    return y;
  }
  void to_bf16(const std::string& x, const std::string& y, std::int64_t n) {
    d_.steps.push_back({&cast::to_bf16_family(), Problem{"bf16", {{"n", n}}}, x, "", "", y});
  }

 private:
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

/// dlogits = (softmax - onehot(target)) / rows: exp(x - lse), the one-hot
/// subtracted by a scatter, the mean's scale.
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
    c.unary(Unary::kScale, "f32", n, prob, "dlogits", cross_entropy::mean_scale(p));
    return c.done();
  }
  const std::string d = c.temp("dlogits_f32", DType::kF32, n);
  c.unary(Unary::kScale, "f32", n, prob, d, cross_entropy::mean_scale(p));
  c.to_bf16(d, "dlogits", n);
  return c.done();
}

using Decomposer = std::function<Decomposition(const Problem&)>;
const std::map<std::string, Decomposer>& decomposers() {
  static const std::map<std::string, Decomposer> all = {
      {"rmsnorm_fwd", rmsnorm_fwd},
      {"rmsnorm_bwd", rmsnorm_bwd},
      {"residual_rmsnorm_fwd", residual_rmsnorm_fwd},
      {"residual_rmsnorm_bwd", residual_rmsnorm_bwd},
      {"swiglu_fwd", swiglu_fwd},
      {"swiglu_bwd", swiglu_bwd},
      {"cross_entropy_fwd", cross_entropy_fwd},
      {"cross_entropy_bwd", cross_entropy_bwd},
  };
  return all;
}

std::uint64_t aligned(std::uint64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

}  // namespace

std::vector<std::string> decomposed_families() {
  std::vector<std::string> names;
  for (const auto& [name, f] : decomposers()) names.push_back(name);
  return names;
}

Decomposition decompose(const std::string& family, const Problem& problem) {
  const auto it = decomposers().find(family);
  if (it == decomposers().end()) {
    std::string known;
    for (const auto& n : decomposed_families()) known += (known.empty() ? "" : ", ") + n;
    throw_error(ErrorKind::kInvalidInput,
                fmt::format("no eager decomposition of '{}'; families with one: {}", family, known));
  }
  find_family(family).check_problem(problem);
  return it->second(problem);
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
  EagerPlan out;
  out.temporaries_bytes = static_cast<std::size_t>(offset);
  for (const Step& s : d.steps) {
    EagerStep e{s.family, s.family->default_config(s.problem), s.problem, {}};
    if (const auto* prim = dynamic_cast<const PrimitiveFamily*>(s.family))
      e.launches = prim->plan(e.config, s.problem,
                              PrimArgs{.x = address(s.x), .b = address(s.b), .idx = address(s.idx), .y = address(s.y),
                                       .alpha = s.alpha},
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
  return {{"logits", a.logits}, {"targets", a.targets}, {"lse", a.lse}, {"dlogits", a.dlogits}};
}

}  // namespace ktune::templates::eager
