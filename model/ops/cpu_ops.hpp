// The cpu backend of the op interface: the families' CPU references
// (templates/<family>/reference.hpp) split over threads, GEMMs through
// OpenBLAS (model/gemm.hpp). Templated on the value type: float for runs,
// double for gradient checks. It owns no memory: the model hands it the
// regions' base pointers (Region::kTokens and kTargets hold int32).
#pragma once
#include <array>
#include <optional>
#include <cstdint>

#include "model/memory_plan.hpp"
#include "model/ops/ops.hpp"
#include "model/parallel.hpp"

namespace ktune::model {

template <class T>
class CpuOps final : public Ops {
 public:
  /// `bases[r]` is region r's first element (nullptr when the run has no
  /// such region); `work` says where its per-thread scratch lies in kWork.
  CpuOps(const std::array<void*, kRegionCount>& bases, const WorkspaceLayout& work, Parallel& parallel);

  void rope_tables(Ref cos, Ref sin, std::int64_t seq, std::int64_t head_dim, double theta) override;
  void gemm(const GemmOp& g) override;
  void embedding_forward(Ref tokens, Ref table, Ref out, std::int64_t rows, std::int64_t dim,
                         std::int64_t vocab) override;
  void embedding_backward(Ref tokens, Ref dout, Ref dtable, std::int64_t rows, std::int64_t dim,
                          std::int64_t vocab) override;
  void rmsnorm_forward(Ref x, Ref w, Ref y, Ref rstd, std::int64_t rows, std::int64_t dim, double eps) override;
  void rmsnorm_backward(Ref x, Ref w, Ref rstd, Ref dy, Ref dx, Ref dw, std::int64_t rows, std::int64_t dim) override;
  void residual_rmsnorm_forward(Ref x, Ref r, Ref w, Ref h, Ref y, Ref rstd, std::int64_t rows, std::int64_t dim,
                                double eps) override;
  void residual_rmsnorm_backward(Ref h, Ref w, Ref rstd, Ref dy, Ref dstream, Ref dh, Ref dw, std::int64_t rows,
                                 std::int64_t dim) override;
  void rope_forward(Ref x, Ref cos, Ref sin, std::int64_t tokens, std::int64_t seq, std::int64_t heads,
                    std::int64_t head_dim, std::int64_t row_stride) override;
  void rope_backward(Ref dx, Ref cos, Ref sin, std::int64_t tokens, std::int64_t seq, std::int64_t heads,
                     std::int64_t head_dim, std::int64_t row_stride) override;
  void attention_forward(Ref q, Ref k, Ref v, Ref saved, Ref out, const templates::attention::AttentionShape& s,
                         std::int64_t qkv_row) override;
  void attention_backward(Ref q, Ref k, Ref v, Ref out, Ref saved, Ref dout, Ref dq, Ref dk, Ref dv,
                          const templates::attention::AttentionShape& s, std::int64_t qkv_row) override;
  void swiglu_forward(Ref a, Ref b, Ref h, std::int64_t n) override;
  void swiglu_backward(Ref a, Ref b, Ref dh, Ref da, Ref db, std::int64_t n) override;
  void cross_entropy_forward(Ref logits, Ref targets, Ref losses, Ref lse, std::int64_t rows,
                             std::int64_t vocab) override;
  void cross_entropy_backward(Ref logits, Ref targets, Ref lse, Ref dlogits, std::int64_t rows, std::int64_t vocab,
                              std::int64_t mean_over) override;
  void accumulate(Ref x, Ref y, std::int64_t n) override;
  double mean(Ref values, std::int64_t n) override;
  /// fp32 only (the reference's type); throws kInvalidInput for double.
  void adamw_step(const std::vector<AdamwTensor>& tensors, const templates::adamw::AdamwHyper& hyper) override;
  /// The global L2 norm of the gradients the last AdamW step clipped by,
  /// before clipping; nullopt before a step or after one that did not clip.
  std::optional<double> clipped_norm() const { return clipped_norm_; }

 private:
  T* at(Ref r) const;
  // RMSNorm's backward over `rows` in kNormDwChunks chunks, which the threads
  // share: share(b, e, dw_partial) runs rows [b, e) accumulating into its
  // chunk's own dw row of the workspace, and the rows are summed in chunk
  // order into dw: the same sums at any thread count.
  template <class Share>
  void norm_backward_rows(Ref dw, std::int64_t rows, std::int64_t dim, Share share);
  const std::int32_t* ints(Ref r) const;

  std::array<void*, kRegionCount> bases_;
  WorkspaceLayout work_;
  Parallel& parallel_;
  std::optional<double> clipped_norm_;
};

extern template class CpuOps<float>;
extern template class CpuOps<double>;

}  // namespace ktune::model
