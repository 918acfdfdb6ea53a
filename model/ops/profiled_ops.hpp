// Where a training step's time goes, op by op: ProfiledOps wraps a backend's
// Ops and times every op the walk issues between two marks of the run's clock
// (CUDA events on the stream on a GPU, the host clock after waiting on cpu and
// emu), and the host's time inside the call (what enqueuing it cost; on a GPU
// an op whose host time reaches its device time is bound by its launches).
// OpProfile gathers those times over steps, per phase and op and shape, for
// `ktune bench e2e --profile`.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "model/nvtx.hpp"
#include "model/ops/ops.hpp"
#include "tuner/exec/backend.hpp"

namespace ktune::model {

/// A run's clock: a mark after the work enqueued so far, and the milliseconds
/// between two marks (waiting for the later one).
struct OpClock {
  std::function<std::unique_ptr<tuner::exec::Mark>()> mark;
  std::function<double(const tuner::exec::Mark&, const tuner::exec::Mark&)> elapsed_ms;
};

/// One op of a step's walk, by phase, name and shape, over the profiled steps.
struct OpTimes {
  std::string phase;  ///< forward | backward | optimizer
  std::string op;     ///< the Ops call: gemm, attention_forward, ...
  std::string shape;  ///< its sizes, as the calls of one shape share them ("256x2304x768 NT")
  std::int64_t calls = 0;         ///< per step
  double flops = 0;               ///< per step, for GEMMs and attention (0: not counted)
  std::vector<double> device_ms;  ///< one per step: all its calls, between the clock's marks
  std::vector<double> host_ms;    ///< one per step: the host's time inside its calls
};

class OpProfile {
 public:
  explicit OpProfile(OpClock clock) : clock_(std::move(clock)) {}

  /// Starts a profiled step; the ops until end_step() count for it.
  void begin_step();
  /// Reads the step's marks (waiting for its work) into the rows.
  void end_step();
  /// Steps profiled so far.
  std::int64_t steps() const { return steps_; }
  /// The rows, in the order their ops first ran.
  const std::vector<OpTimes>& rows() const { return rows_; }

  /// For ProfiledOps: runs `call` between two marks, as `op` of `shape` in
  /// `phase`, a call of `flops` floating-point operations (0: not counted).
  void time(const std::string& phase, const std::string& op, const std::string& shape, double flops,
            const std::function<void()>& call);

 private:
  struct Pending {
    std::size_t row;
    std::unique_ptr<tuner::exec::Mark> from, to;
    double host_ms;
    double flops;
  };
  OpClock clock_;
  std::vector<OpTimes> rows_;
  std::vector<Pending> pending_;
  std::int64_t steps_ = 0;
  bool in_step_ = false;
};

/// `inner`'s ops, each timed into `profile` as part of `phase` (when one is
/// given), and each an NVTX range named by its op and shape (when ranges are
/// on, model/nvtx.hpp).
class ProfiledOps final : public Ops {
 public:
  ProfiledOps(Ops& inner, OpProfile* profile, std::string phase)
      : inner_(inner), profile_(profile), phase_(std::move(phase)) {}

  void rope_tables(Ref cos, Ref sin, std::int64_t seq, std::int64_t head_dim, double theta) override;
  void gemm(const GemmOp& g) override;
  void embedding_forward(Ref tokens, Ref table, Ref out, std::int64_t rows, std::int64_t dim,
                         std::int64_t vocab) override;
  void embedding_backward(Ref tokens, Ref dout, Ref dtable, std::int64_t rows, std::int64_t dim,
                          std::int64_t vocab) override;
  void rmsnorm_forward(Ref x, Ref w, Ref y, Ref rstd, std::int64_t rows, std::int64_t dim, double eps) override;
  void rmsnorm_backward(Ref x, Ref w, Ref rstd, Ref dy, Ref dx, Ref dw, std::int64_t rows,
                        std::int64_t dim) override;
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
  void adamw_step(const std::vector<AdamwTensor>& tensors, const templates::adamw::AdamwHyper& hyper) override;

 private:
  void time(const char* op, const std::string& shape, const std::function<void()>& call, double flops = 0) {
    const NvtxRange range([&] { return fmt::format("{} {}", op, shape); });
    if (profile_) return profile_->time(phase_, op, shape, flops, call);
    call();
  }
  Ops& inner_;
  OpProfile* profile_;
  std::string phase_;
};

/// Runs `walk` over `ops` as `phase`: in an NVTX range of that name, its ops
/// timed into `profile` when one is given and each in a range of its own when
/// ranges are on.
template <class Walk>
auto walk_profiled(Ops& ops, OpProfile* profile, const char* phase, Walk&& walk) {
  const NvtxRange range(phase);
  if (!profile && !nvtx_ranges_enabled()) return walk(ops);
  ProfiledOps timed(ops, profile, phase);
  return walk(static_cast<Ops&>(timed));
}

}  // namespace ktune::model
