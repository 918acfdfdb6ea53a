// The device backend of the op interface, over the one execution seam
// (tuner/exec/backend.hpp), so that the same code serves `cuda` and `emu`:
//   memory   one allocation, the memory plan's regions back to back (each
//            256-byte aligned), then the ops' scratch
//   kernels  the families' kernels through TunedKernels: rendered, compiled
//            once per process and shape class (through the binary cache),
//            loaded, planned with their typed Args at the regions' addresses
//   configs  compiled mode: the tuned cache's (exact, else nearest, else the
//            family default; counted); eager mode: the family defaults
//   eager    each op whose family has an eager decomposition runs as that
//            chain of primitive kernels (eager_chains.hpp), its temporaries
//            in the scratch, each planned once (ChainPlans); the others run
//            their family's default kernel; attention is materialised (GEMM,
//            softmax, GEMM), its softmax as its chain
//   counts   every kernel launch and GEMM call is counted (launches())
//   GEMMs    a GemmEngine: cuBLASLt on `cuda` (eager: the heuristic's first
//            algorithm; compiled: chosen by timing, from and into the tuned
//            cache, tuner/cuda/gemm_select.hpp), OpenBLAS on the host through
//            the backend's copies on `emu`
//   precision  f32; tf32 (GEMMs on the tf32 matrix units, and in compiled
//            mode flash attention, keeping the log-sum-exp instead of the
//            probabilities); bf16 mixed precision: each buffer of the dtype
//            the memory plan gives it (bf16 activations and their gradients;
//            fp32 statistics, master weights, gradients and AdamW state),
//            the families' bf16 problems, GEMMs on bf16 operands with fp32
//            accumulation reading the weights' bf16 copy (kWeightsBf16),
//            which AdamW rewrites each step (and DeviceTransformer writes
//            with the master weights)
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/tuned_cache.hpp"
#include "model/ops/launch_count.hpp"
#include "model/ops/ops.hpp"
#include "templates/adamw/adamw.hpp"
#include "model/precision.hpp"
#include "model/walk.hpp"
#include "tuner/cuda/cublaslt.hpp"
#include "tuner/exec/backend.hpp"
#include "tuner/session/tuned_kernels.hpp"

namespace ktune::templates::eager {
struct Bindings;
}

namespace ktune::model {

struct ChainPlans;  // eager_chains.hpp

/// How a device backend runs the step (DESIGN.md, "Modes on cuda").
enum class Mode {
  kEager,     ///< untuned: the families' eager chains (else their defaults), per-tensor eager AdamW,
              ///< materialised attention, cuBLASLt top-1
  kCompiled,  ///< tuned configs from the cache, fused multi-tensor AdamW
};
const char* to_string(Mode mode);
/// "eager" or "compiled"; throws kInvalidInput naming the accepted ones.
Mode parse_mode(const std::string& text);

/// GEMMs on device addresses of one backend.
class GemmEngine {
 public:
  virtual ~GemmEngine() = default;
  virtual std::string name() const = 0;
  virtual void gemm(const tuner::GemmDesc& g) = 0;
  /// Warnings a person should see (stale or refused GEMM cache entries).
  virtual std::vector<std::string> warnings() const { return {}; }
};

/// OpenBLAS on the host: operands downloaded from `arena`, the product
/// uploaded back (the emulation's GEMMs; correct anywhere, fast nowhere).
/// It models the device's numerics: bf16 operands are read as bf16 (and a
/// bf16 product rounded to bf16), a tf32 GEMM's inputs are rounded to tf32.
std::unique_ptr<GemmEngine> make_host_gemm(tuner::exec::Backend& backend, const tuner::exec::Buffer& arena);
/// Where compiled mode's newly timed GEMM choices go (cache::CacheFile::put).
using GemmStore = std::function<void(const cache::Entry&)>;
/// The workspace a run on a GPU gives cuBLASLt's algorithms, allocated
/// beside its memory plan's buffers.
constexpr std::size_t kCublasLtWorkspaceBytes = std::size_t{32} << 20;
/// cuBLASLt on the backend's stream, with `workspace` for its algorithms:
/// the heuristic's first, or with `timed`, each GEMM's algorithm chosen by
/// timing (the cache's exact entry first; new choices go to `store`); with
/// `timed` and `deterministic`, the cache's exact entry, else the
/// heuristic's first, none timed.
std::unique_ptr<GemmEngine> make_cublaslt_gemm(tuner::exec::Backend& backend, const tuner::exec::Buffer& workspace,
                                               bool timed = false, const cache::TunedCache* tuned = nullptr,
                                               GemmStore store = {}, bool deterministic = false);

struct DeviceOptions {
  Mode mode = Mode::kCompiled;
  Precision precision = Precision::kF32;     ///< the layout's (StepLayout::precision)
  const cache::TunedCache* tuned = nullptr;  ///< compiled mode's configs; null: the family defaults
  GemmStore gemm_store = {};                 ///< compiled mode on cuda: where timed GEMM choices go
  unsigned compile_threads = 0;              ///< 0: the environment's default
  /// Compiled mode: DeviceTransformer captures the forward's and the
  /// backward's launches as graphs on their second run and replays them
  /// from then on (model/device_model.hpp).
  bool graphs = false;
  /// The same bits run after run (given the same cache): every kernel's
  /// config one that sums in a fixed order (tuner::choose_config), an eager
  /// chain with atomics (the embedding backward's index_add_) run as its
  /// family's kernel instead, and on cuda no GEMM algorithm chosen by timing
  /// (the cache's, else the heuristic's first).
  bool deterministic = false;
};

class DeviceOps final : public Ops {
 public:
  /// Chooses and compiles the step's kernels, then allocates the run's memory
  /// (refused by the backend when it does not fit). `layout` must have been
  /// made for the options (device_layout). `backend` and the options' cache
  /// must outlive this object.
  DeviceOps(tuner::exec::Backend& backend, const StepLayout& layout, const DeviceOptions& options);
  ~DeviceOps() override;

  /// Host <-> device copies of `bytes` at a Ref (complete on return).
  void upload(Ref at, const void* host, std::size_t bytes);
  void download(void* host, Ref at, std::size_t bytes);
  /// Every byte of the run's memory set to 0xFF (NaN), before inputs go in.
  void poison();
  std::uint64_t address(Ref at) const;

  const tuner::TunedKernels& kernels() const { return *kernels_; }
  const GemmEngine& gemm_engine() const { return *gemm_; }
  Mode mode() const { return options_.mode; }
  bool deterministic() const { return options_.deterministic; }
  std::size_t allocated_bytes() const;
  /// Kernel launches and GEMM calls enqueued since construction.
  const LaunchCount& launches() const { return launches_; }
  /// What a graph's capture enqueued is counted when a replay runs it:
  /// set_launches takes the count back to before the capture, and each
  /// replay adds the graph's launches.
  void set_launches(const LaunchCount& count) { launches_ = count; }
  void add_launches(const LaunchCount& more) { launches_ += more; }
  /// Eager chains planned so far: one per (family, problem, bound addresses
  /// and scalars); an op planned before reuses its plan, so the steps after
  /// the first build none.
  std::size_t chain_plans() const;
  /// Bytes of the ops' scratch: attention's dS, eager AdamW's temporary,
  /// the kernels' workspaces and the eager chains' temporaries, the largest.
  std::size_t scratch_bytes() const { return scratch_bytes_; }

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
  /// Materialised attention's softmax, in place: the (B, H, S, S) scores at
  /// `scores` scaled, masked and turned into probabilities, the one launch
  /// attention_forward makes between its GEMMs in eager mode (timed alone by
  /// `ktune bench attention`, seed 003's softmax share).
  void attention_softmax(Ref scores, const templates::attention::AttentionShape& s);
  void swiglu_forward(Ref a, Ref b, Ref h, std::int64_t n) override;
  void swiglu_backward(Ref a, Ref b, Ref dh, Ref da, Ref db, std::int64_t n) override;
  void cross_entropy_forward(Ref logits, Ref targets, Ref losses, Ref lse, std::int64_t rows,
                             std::int64_t vocab) override;
  void cross_entropy_backward(Ref logits, Ref targets, Ref lse, Ref dlogits, std::int64_t rows, std::int64_t vocab,
                              std::int64_t mean_over) override;
  void accumulate(Ref x, Ref y, std::int64_t n) override;
  double mean(Ref values, std::int64_t n) override;
  void adamw_step(const std::vector<AdamwTensor>& tensors, const templates::adamw::AdamwHyper& hyper) override;
  /// The global L2 norm of the gradients the last AdamW step clipped by,
  /// before clipping, as grad_norm wrote it on the device (read back, a
  /// wait for the step); nullopt before a step or after one that did not clip.
  std::optional<double> clipped_norm();

 private:
  // The prepared kernel of (family, problem), compiled now if it was not in
  // the step's list; its launches go to the backend with `plan`.
  const tuner::TunedKernel& kernel(const templates::Family& family, const templates::Problem& problem);
  void launch(const tuner::TunedKernel& k, const std::vector<templates::Launch>& plan);
  // The ops' scratch after the first `kept` bytes (what the calling op keeps
  // there), checked against its size.
  std::uint64_t scratch(std::size_t bytes, std::size_t kept = 0) const;
  // One non-GEMM op: its family's eager chain when it runs as one
  // (eager_chains.hpp), else its kernel with the workspace it asks for. Every
  // op but GEMMs and AdamW goes through here.
  template <class Args>
  void run(const templates::TypedFamily<Args>& family, const templates::Problem& problem, Args args,
           std::size_t kept = 0);
  // The launches of one chain over `args` and its temporaries in the scratch
  // after `kept`, in order on the stream; planned once per (family, problem,
  // bindings) and kept in chain_plans_ (eager_chains.cpp).
  void run_chain(const templates::Family& family, const templates::Problem& problem, std::size_t kept,
                 const templates::eager::Bindings& args);
  const templates::adamw::AdamwFamily& adamw_family() const;
  // Bytes of one unit of a Ref's offset into region r (layout_unit_bytes
  // for the activation regions and the scratch).
  std::size_t unit_bytes(Region r) const;
  templates::DType gemm_type(Ref at) const;

  tuner::exec::Backend& backend_;
  StepLayout L_;
  DeviceOptions options_;
  std::string dtype_;  // the families' problem dtype (problem_dtype)
  std::unique_ptr<tuner::TunedKernels> kernels_;
  std::array<std::size_t, kRegionCount> region_offset_{};  // bytes from the arena's start
  std::size_t scratch_offset_ = 0, scratch_bytes_ = 0;
  std::size_t clip_offset_ = 0;  // grad_norm's (norm, clip factor), fp32, in the arena's tail
  bool clipped_ = false;         // the last AdamW step clipped: the norm at clip_offset_ is its
  std::unique_ptr<tuner::exec::Buffer> arena_;
  std::unique_ptr<tuner::exec::Buffer> gemm_workspace_;
  std::unique_ptr<GemmEngine> gemm_;
  LaunchCount launches_;
  std::unique_ptr<ChainPlans> chain_plans_;
};

/// The layout of a run on a device backend: the layout's precision, and the
/// attention attention_saved(precision, mode) says (flash in compiled tf32
/// and bf16).
StepLayout device_layout(const ModelConfig& config, const RunShape& shape, Allocation allocation,
                         const DeviceOptions& options);

/// The families' problems of a step on a device backend in `mode`: the
/// step's list (step_kernels.hpp) for the layout's precision and attention,
/// with the mode's AdamW family; for a layout without gradients (eval,
/// generate), its forward's kernels alone (the families named *_fwd). Eager
/// mode runs the chains of the decomposed ones (with_chains).
std::vector<tuner::KernelRequest> device_step_kernels(const StepLayout& layout, Mode mode);

/// The ops' scratch of a run of `layout` in `mode`, each kernel at the
/// config `config_of` gives it: materialised attention's dS (kept while the
/// softmax backward runs after it), the eager chains' temporaries, eager
/// AdamW's fp32 temporary of the largest tensor, the kernels' workspaces
/// and grad_norm's partials, the largest of them (one op uses it at a time).
std::size_t ops_scratch_bytes(const StepLayout& layout, Mode mode, bool deterministic,
                              const std::function<Config(const tuner::KernelRequest&)>& config_of);
/// ops_scratch_bytes at the family defaults, as a run without a tuned cache
/// takes them: what the memory plan counts (plan_run).
std::size_t planned_scratch_bytes(const StepLayout& layout, Mode mode, bool deterministic);

}  // namespace ktune::model
