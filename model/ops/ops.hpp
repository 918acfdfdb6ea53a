// The op interface the Transformer's walk is written against (model/walk.hpp):
// one forward, backward and AdamW step, several backends. A backend owns the
// run's memory (the regions of the static memory plan) and resolves a Ref, a
// place in one region, to its own pointer or device address:
//   cpu     CpuOps<T> (model/ops/cpu_ops.hpp): the families' CPU references
//           and OpenBLAS, templated on T (float for runs, double for gradient checks)
//   device  DeviceOps (model/ops/device_ops.hpp): the families' kernels on an
//           execution backend (cuda | emu), GEMMs through a GemmEngine
// Sizes are elements; every Ref names elements of its region's value type,
// except in a bf16 layout's activation regions (kLayers, kFinal, kWork),
// whose offsets count 2-byte units (memory_plan.hpp, layout_unit_bytes).
// All matrices are row-major; linear weights are (out, in) like torch.nn.Linear.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "templates/adamw/reference.hpp"
#include "templates/attention/reference.hpp"

namespace ktune::model {

/// The regions of a run's memory, each laid out by the memory plan.
enum class Region : int {
  kParams,    ///< ParameterLayout: the flat parameter buffer
  kGrads,     ///< ParameterLayout: their gradients
  kExpAvg,    ///< ParameterLayout: AdamW first moments
  kExpAvgSq,  ///< ParameterLayout: AdamW second moments
  kLayers,    ///< (slots, LayerLayout::size): one slot per block when training
  kFinal,     ///< FinalLayout
  kWork,      ///< WorkspaceLayout
  kTokens,    ///< (batch, context) int32
  kTargets,   ///< (batch, context) int32
  kWeightsBf16,  ///< ParameterLayout: bf16 mixed precision's bf16 copy of the parameters (empty otherwise)
  kScratch,   ///< a backend's own scratch for its ops (not the plan's; never named by the walk)
};
inline constexpr int kRegionCount = 11;
std::string region_name(Region r);

/// A place in a region: the first element of a buffer.
struct Ref {
  Region region = Region::kParams;
  std::int64_t offset = 0;  ///< elements from the region's start
  Ref operator+(std::int64_t elements) const { return {region, offset + elements}; }
};

/// C (m, n) = alpha op(A) op(B) + beta C, row-major, `batch` times with the
/// operands advanced by their strides (elements) each time. op(A) is (m, k):
/// A is stored (m, k) with row stride lda, or (k, m) when trans_a.
struct GemmOp {
  bool trans_a = false, trans_b = false;
  std::int64_t m = 0, n = 0, k = 0;
  Ref a, b, c;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  double alpha = 1, beta = 0;
  std::int64_t batch = 1;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

/// One parameter tensor's optimizer operands, for a multi-tensor AdamW step.
struct AdamwTensor {
  Ref param, grad, exp_avg, exp_avg_sq;
  std::int64_t numel = 0;
};

/// The ops of one training step. Implementations enqueue in order (a device
/// backend's launches go to one stream); `mean` is the only op that returns a
/// value to the host, and waits for what came before it.
class Ops {
 public:
  virtual ~Ops() = default;

  /// Fills the RoPE tables, (seq, head_dim / 2) each (the reference's tables).
  virtual void rope_tables(Ref cos, Ref sin, std::int64_t seq, std::int64_t head_dim, double theta) = 0;

  virtual void gemm(const GemmOp& g) = 0;

  /// out (rows, dim) = table[tokens]; table (vocab, dim).
  virtual void embedding_forward(Ref tokens, Ref table, Ref out, std::int64_t rows, std::int64_t dim,
                                 std::int64_t vocab) = 0;
  /// dtable (vocab, dim) = sum over tokens of dout rows (overwritten).
  virtual void embedding_backward(Ref tokens, Ref dout, Ref dtable, std::int64_t rows, std::int64_t dim,
                                  std::int64_t vocab) = 0;

  /// y (rows, dim) = x * rstd * w; rstd (rows,) kept.
  virtual void rmsnorm_forward(Ref x, Ref w, Ref y, Ref rstd, std::int64_t rows, std::int64_t dim, double eps) = 0;
  /// dx (rows, dim) and dw (dim,), both overwritten.
  virtual void rmsnorm_backward(Ref x, Ref w, Ref rstd, Ref dy, Ref dx, Ref dw, std::int64_t rows,
                                std::int64_t dim) = 0;
  /// The residual add that ends a sub-block and the norm that starts the
  /// next, one op: h (rows, dim) = x + r, then y (rows, dim) = h * rstd * w
  /// as rmsnorm_forward, rstd (rows,) kept. h may be x or r (the stream
  /// updated in place); y and rstd alias nothing.
  virtual void residual_rmsnorm_forward(Ref x, Ref r, Ref w, Ref h, Ref y, Ref rstd, std::int64_t rows,
                                        std::int64_t dim, double eps) = 0;
  /// Its backward: dh (rows, dim) = dstream + rmsnorm_backward's dx of h
  /// from dy (the gradient of h, so of both x and r), dw (dim,) overwritten.
  /// dh may be dstream (the stream's gradient updated in place), not h or dy.
  virtual void residual_rmsnorm_backward(Ref h, Ref w, Ref rstd, Ref dy, Ref dstream, Ref dh, Ref dw,
                                         std::int64_t rows, std::int64_t dim) = 0;

  /// In-place rotation of x (tokens, heads, head_dim), token t at position
  /// t % seq, tokens' rows `row_stride` elements apart (heads * head_dim when
  /// x is contiguous; a fused projection's q and k rows are further apart).
  virtual void rope_forward(Ref x, Ref cos, Ref sin, std::int64_t tokens, std::int64_t seq, std::int64_t heads,
                            std::int64_t head_dim, std::int64_t row_stride) = 0;
  virtual void rope_backward(Ref dx, Ref cos, Ref sin, std::int64_t tokens, std::int64_t seq, std::int64_t heads,
                             std::int64_t head_dim, std::int64_t row_stride) = 0;

  /// out = softmax(Q K^T / sqrt(head_dim), causal) V; q, k, v, out (batch,
  /// seq, heads, head_dim), a token's row of q, k and v `qkv_row` elements
  /// after the previous one's (heads * head_dim, or 3 * heads * head_dim in
  /// a fused projection: flash attention only). `saved` is what the
  /// backward needs, as the layout's AttentionSaved says: the (batch, heads,
  /// seq, seq) probabilities (materialising attention), or the (batch,
  /// heads, seq) fp32 row log-sum-exp (flash attention).
  virtual void attention_forward(Ref q, Ref k, Ref v, Ref saved, Ref out,
                                 const templates::attention::AttentionShape& s, std::int64_t qkv_row) = 0;
  /// dq, dk, dv (overwritten; rows as q, k, v's) from dout, the forward's
  /// `out` and `saved` (flash attention's backward reads O; the materialised
  /// one does not).
  virtual void attention_backward(Ref q, Ref k, Ref v, Ref out, Ref saved, Ref dout, Ref dq, Ref dk, Ref dv,
                                  const templates::attention::AttentionShape& s, std::int64_t qkv_row) = 0;

  /// h = silu(a) * b over n elements.
  virtual void swiglu_forward(Ref a, Ref b, Ref h, std::int64_t n) = 0;
  /// da (may be dh) and db.
  virtual void swiglu_backward(Ref a, Ref b, Ref dh, Ref da, Ref db, std::int64_t n) = 0;

  /// losses, lse (rows,) of logits (rows, vocab) against targets (rows,) int32.
  virtual void cross_entropy_forward(Ref logits, Ref targets, Ref losses, Ref lse, std::int64_t rows,
                                     std::int64_t vocab) = 0;
  /// dlogits (may be logits) = (softmax - onehot) / mean_over: the gradient
  /// of the mean of mean_over row losses (rows; a step's tokens when it
  /// accumulates micro-batches).
  virtual void cross_entropy_backward(Ref logits, Ref targets, Ref lse, Ref dlogits, std::int64_t rows,
                                      std::int64_t vocab, std::int64_t mean_over) = 0;

  /// y (n,) += x (n,), fp32: a micro-batch's gradient added to its step's.
  virtual void accumulate(Ref x, Ref y, std::int64_t n) = 0;

  /// The mean of n values, summed in double in index order, on the host.
  virtual double mean(Ref values, std::int64_t n) = 0;

  /// One AdamW step over every tensor (hyper.step counts from 1).
  virtual void adamw_step(const std::vector<AdamwTensor>& tensors, const templates::adamw::AdamwHyper& hyper) = 0;
};

}  // namespace ktune::model
