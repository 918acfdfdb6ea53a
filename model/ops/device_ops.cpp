// The device backend's ops (see device_ops.hpp). Shapes in comments: N
// tokens, C d_model, H heads, D head_dim, S context, B batch.
#include "model/ops/device_ops.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "base/error.hpp"
#include "model/gemm.hpp"
#include "model/ops/eager_chains.hpp"
#include "model/step_kernels.hpp"
#include "tuner/cuda/gemm_select.hpp"
#include "templates/adamw/adamw.hpp"
#include "templates/attention/attention.hpp"
#include "templates/cross_entropy/cross_entropy.hpp"
#include "templates/eager/primitive.hpp"
#include "templates/embedding/embedding.hpp"
#include "templates/grad_norm/grad_norm.hpp"
#include "templates/render.hpp"
#include "templates/rmsnorm/rmsnorm.hpp"
#include "templates/rope/rope.hpp"
#include "templates/softmax/softmax.hpp"
#include "templates/swiglu/swiglu.hpp"

namespace ktune::model {

namespace tr = ktune::templates;
using templates::Problem;

namespace {

constexpr std::size_t kRegionAlign = 256;
constexpr std::size_t kFloatBytes = 4;

std::size_t align_up(std::size_t x) { return (x + kRegionAlign - 1) / kRegionAlign * kRegionAlign; }

// The families' problems as the step's list names them (step_kernels.hpp),
// of the dtype problem_dtype(precision) says.
Problem rows_problem(const std::string& dtype, std::int64_t rows, std::int64_t dim) {
  return {dtype, {{"rows", rows}, {"dim", dim}}};
}
Problem embed_problem(const std::string& dtype, std::int64_t rows, std::int64_t dim, std::int64_t vocab) {
  return {dtype, {{"rows", rows}, {"dim", dim}, {"vocab", vocab}}};
}
Problem rope_problem(const std::string& dtype, std::int64_t tokens, std::int64_t seq, std::int64_t heads,
                     std::int64_t head_dim) {
  return {dtype, {{"head_dim", head_dim}, {"heads", heads}, {"seq", seq}, {"tokens", tokens}}};
}
Problem gate_problem(const std::string& dtype, std::int64_t n) { return {dtype, {{"n", n}}}; }
Problem loss_problem(const std::string& dtype, std::int64_t rows, std::int64_t vocab) {
  return {dtype, {{"rows", rows}, {"vocab", vocab}}};
}

class HostGemm final : public GemmEngine {
 public:
  HostGemm(tuner::exec::Backend& backend, const tuner::exec::Buffer& arena) : backend_(backend), arena_(arena) {}
  std::string name() const override { return "OpenBLAS on the host"; }

  // Host work in the backend's order, so a capture records it (with g).
  void gemm(const tuner::GemmDesc& g) override {
    backend_.enqueue_host([this, g] { multiply(g); });
  }

 private:
  void multiply(const tuner::GemmDesc& g) {
    const std::int64_t na = g.span_a(), nb = g.span_b(), nc = g.span_c();
    tuner::check_gemm_types(g);
    a_.resize(na), b_.resize(nb), c_.resize(nc);
    fetch(a_.data(), g.a, na, g.a_type);
    fetch(b_.data(), g.b, nb, g.b_type);
    fetch(c_.data(), g.c, nc, g.c_type);  // also what lies between strided rows, written back unchanged
    if (g.tf32) {
      round_to_tf32(a_.data(), na);
      round_to_tf32(b_.data(), nb);
    }
    for (std::int64_t i = 0; i < g.batch; ++i)
      gemm_rowmajor<float>(g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, a_.data() + i * g.stride_a, g.lda,
                           b_.data() + i * g.stride_b, g.ldb, g.beta, c_.data() + i * g.stride_c, g.ldc);
    if (g.c_type == templates::DType::kBF16) {
      bits_.resize(nc);
      for (std::int64_t i = 0; i < nc; ++i) bits_[i] = templates::float_to_bf16_bits(c_[i]);
      backend_.upload_range(arena_, offset(g.c), bits_.data(), nc * sizeof(std::uint16_t));
    } else {
      backend_.upload_range(arena_, offset(g.c), c_.data(), nc * sizeof(float));
    }
  }
  std::size_t offset(std::uint64_t address) const {
    KTUNE_REQUIRE(address >= arena_.address() && address < arena_.address() + arena_.bytes(),
                  "host GEMM: an operand outside the run's memory");
    return static_cast<std::size_t>(address - arena_.address());
  }
  void fetch(float* host, std::uint64_t address, std::int64_t n, templates::DType type) {
    if (type != templates::DType::kBF16) {
      backend_.download_range(host, arena_, offset(address), n * sizeof(float));
      return;
    }
    bits_.resize(n);
    backend_.download_range(bits_.data(), arena_, offset(address), n * sizeof(std::uint16_t));
    for (std::int64_t i = 0; i < n; ++i) host[i] = templates::bf16_bits_to_float(bits_[i]);
  }

  tuner::exec::Backend& backend_;
  const tuner::exec::Buffer& arena_;
  std::vector<float> a_, b_, c_;
  std::vector<std::uint16_t> bits_;
};

class CublasLtGemm final : public GemmEngine {
 public:
  CublasLtGemm(tuner::exec::Backend& backend, const tuner::exec::Buffer& workspace, bool timed,
               const cache::TunedCache* tuned, GemmStore store, bool deterministic)
      : backend_(backend), lt_(workspace.address(), workspace.bytes()), deterministic_(deterministic) {
    if (!timed) return;
    trials_ = tuner::make_cublaslt_trials(backend_, lt_, kGemmTiming);
    selector_ = std::make_unique<tuner::GemmSelector>(*trials_, backend_.device(), tuned, std::move(store),
                                                      tuner::GemmSelectOptions{.time = !deterministic});
  }
  std::string name() const override {
    if (!selector_) return "cuBLASLt (heuristic's first algorithm)";
    const auto& c = selector_->counts();
    if (c.cached + c.timed + c.heuristic == 0)  // a runtime's start: its GEMMs choose as they first run
      return fmt::format("cuBLASLt (algorithms chosen as each GEMM first runs: the tuned cache's, else {})",
                         deterministic_ ? "the heuristic's first, untimed" : "timed then");
    if (deterministic_)
      return fmt::format("cuBLASLt (untimed algorithms: {} from the tuned cache, {} the heuristic's first)", c.cached,
                         c.heuristic);
    return fmt::format("cuBLASLt (timed algorithms: {} from the tuned cache, {} timed now, {} candidates rejected{})",
                       c.cached, c.timed, c.rejected,
                       c.heuristic > 0 ? fmt::format("; {} the heuristic's first, untimed (see the warnings)",
                                                     c.heuristic)
                                       : "");
  }
  void gemm(const tuner::GemmDesc& g) override {
    if (selector_) lt_.matmul(g, backend_.native_stream(), selector_->choose(g));
    else lt_.matmul(g, backend_.native_stream());
  }
  std::vector<std::string> warnings() const override {
    return selector_ ? selector_->warnings() : std::vector<std::string>{};
  }

 private:
  // Candidates are many and a GEMM is short: a few repetitions suffice.
  static inline const tuner::RunOptions kGemmTiming{
      .validate = false, .time = true, .warmup = 2, .min_repetitions = 5, .max_repetitions = 50, .min_seconds = 0.002};
  tuner::exec::Backend& backend_;
  tuner::CublasLt lt_;
  bool deterministic_ = false;  // no algorithm timed: the cache's, else the heuristic's first
  std::unique_ptr<tuner::GemmTrials> trials_;
  std::unique_ptr<tuner::GemmSelector> selector_;
};

}  // namespace

std::unique_ptr<GemmEngine> make_host_gemm(tuner::exec::Backend& backend, const tuner::exec::Buffer& arena) {
  return std::make_unique<HostGemm>(backend, arena);
}

std::unique_ptr<GemmEngine> make_cublaslt_gemm(tuner::exec::Backend& backend, const tuner::exec::Buffer& workspace,
                                               bool timed, const cache::TunedCache* tuned, GemmStore store,
                                               bool deterministic) {
  return std::make_unique<CublasLtGemm>(backend, workspace, timed, tuned, std::move(store), deterministic);
}

const char* to_string(Mode mode) { return mode == Mode::kEager ? "eager" : "compiled"; }

Mode parse_mode(const std::string& text) {
  if (text == "eager") return Mode::kEager;
  if (text == "compiled") return Mode::kCompiled;
  throw Error(ErrorKind::kInvalidInput, "mode '" + text + "'; accepted: eager, compiled");
}

StepLayout device_layout(const ModelConfig& config, const RunShape& shape, Allocation allocation,
                         const DeviceOptions& options) {
  // No cpu threads' scratch (the attention's, the norms' weight gradients): the device ops keep their own.
  StepLayout L = step_layout(config, shape, plan_threads("cuda", 1), allocation, options.precision,
                             attention_saved(options.precision, options.mode == Mode::kCompiled));
  L.batched_projections = options.mode == Mode::kCompiled;  // eager: PyTorch eager's one GEMM per nn.Linear
  const RopeLaunch rope = options.mode == Mode::kCompiled
                              ? compiled_rope_launch(config, shape, L.precision, L.attention)
                              : RopeLaunch::kEach;  // eager: PyTorch eager's one launch each
  L.fused_qkv = rope == RopeLaunch::kFused;
  L.paired_rope = rope == RopeLaunch::kPaired;
  return L;
}

std::vector<tuner::KernelRequest> device_step_kernels(const StepLayout& L, Mode mode) {
  std::vector<tuner::KernelRequest> out;
  const RopeLaunch rope = L.fused_qkv     ? RopeLaunch::kFused
                          : L.paired_rope ? RopeLaunch::kPaired
                                          : RopeLaunch::kEach;
  for (auto& r : step_kernels(L.config, L.shape, L.precision, L.attention, rope)) {
    const std::string& name = r.family->name();
    if (!L.train && !name.ends_with("_fwd")) continue;
    if (!L.optimizer && (name == "adamw" || name == "grad_norm")) continue;  // the step's alone
    if (name == "adamw" && mode == Mode::kEager) r.family = &tr::adamw::eager_family();
    if (name == "grad_norm" && mode == Mode::kEager) r.problem = grad_norm_problem(L.config, true);  // no AdamW clips
    out.push_back(r);
  }
  return out;
}

namespace {

/// dS, materialised attention's backward's, of the activations' type: none in flash attention (compiled tf32
/// and bf16) nor in a forward-only run (eval, generate).
std::size_t kept_ds_bytes(const StepLayout& L) {
  const auto s = L.attention_shape();
  return L.train && L.attention == AttentionSaved::kProbabilities
             ? static_cast<std::size_t>(s.batch * s.heads * s.seq * s.seq * layout_unit_bytes(L.precision))
             : 0;
}

}  // namespace

std::size_t ops_scratch_bytes(const StepLayout& L, Mode mode, bool deterministic,
                              const std::function<Config(const tuner::KernelRequest&)>& config_of) {
  const std::size_t ds = kept_ds_bytes(L);
  // The softmax backward runs while dS is kept: what it needs comes after it.
  const auto kept = [&](const templates::Family* f) {
    return f == &tr::softmax::backward_family() ? align_up(ds) : 0;
  };
  std::size_t scratch = ds;
  std::int64_t largest = 0;
  for (const auto& t : L.params.tensors) largest = std::max(largest, t.numel);
  if (L.optimizer && mode == Mode::kEager)  // eager AdamW's temporary (the fused one takes none)
    scratch = std::max(scratch, static_cast<std::size_t>(largest) * kFloatBytes);
  const auto requests = device_step_kernels(L, mode);
  for (const auto& r : requests)
    scratch = std::max(scratch, kept(r.family) + chain_temporaries_bytes(mode, r, deterministic));
  // grad_norm's partials are the model's tensors' (adamw_step), not its problem's.
  std::vector<tr::grad_norm::Tensor> grads;
  for (const auto& t : L.params.tensors) grads.push_back({.numel = t.numel});
  for (const auto& k : with_chains(mode, requests, deterministic)) {
    const Config c = config_of(k);
    scratch = std::max(scratch, kept(k.family) + k.family->workspace_bytes(c, k.problem));
    if (k.family == &tr::grad_norm::family())
      scratch = std::max(scratch, static_cast<std::size_t>(tr::grad_norm::partial_floats(c, grads)) * kFloatBytes);
  }
  return scratch;
}

std::size_t planned_scratch_bytes(const StepLayout& L, Mode mode, bool deterministic) {
  return ops_scratch_bytes(L, mode, deterministic,
                           [](const tuner::KernelRequest& k) { return k.family->default_config(k.problem); });
}

DeviceOps::DeviceOps(tuner::exec::Backend& backend, const StepLayout& layout, const DeviceOptions& options)
    : backend_(backend),
      L_(layout),
      options_(options),
      dtype_(problem_dtype(layout.precision)),
      chain_plans_(std::make_unique<ChainPlans>()) {
  KTUNE_REQUIRE(std::abs(L_.config.norm_eps - tr::rmsnorm::kEps) <= 1e-12,
                fmt::format("the device backends' RMSNorm eps is {}; the model asks for {}", tr::rmsnorm::kEps,
                            L_.config.norm_eps));
  const StepLayout want = device_layout(L_.config, L_.shape, Allocation::kTrain, options_);
  if (L_.precision != want.precision || L_.attention != want.attention)
    throw Error(ErrorKind::kInternal, "DeviceOps: the layout was not made for these options (device_layout)");
  // Eager mode is untuned: the family defaults, whatever cache was given.
  kernels_ = std::make_unique<tuner::TunedKernels>(
      backend_, options_.mode == Mode::kCompiled ? options_.tuned : nullptr, options_.deterministic);
  // The step's kernels, eager chains' steps included, compiled ahead in parallel.
  const auto requests = device_step_kernels(L_, options_.mode);
  kernels_->prepare(with_chains(options_.mode, requests, options_.deterministic), options_.compile_threads);

  // The ops' scratch: one op at a time uses it, in stream order; attention's
  // backward keeps dS there while its softmax runs after it.
  const std::size_t scratch =
      ops_scratch_bytes(L_, options_.mode, options_.deterministic, [&](const tuner::KernelRequest& r) {
        return kernel(*r.family, r.problem).chosen.config;
      });

  std::size_t at = 0;
  for (int r = 0; r < kRegionCount; ++r) {
    const auto region = static_cast<Region>(r);
    if (region == Region::kScratch) continue;  // after the regions; a region the layout has none of takes 0 bytes
    region_offset_[r] = at;
    at = align_up(at + static_cast<std::size_t>(L_.region_elements(region)) * unit_bytes(region));
  }
  scratch_offset_ = at;
  region_offset_[static_cast<int>(Region::kScratch)] = scratch_offset_;
  scratch_bytes_ = scratch;
  clip_offset_ = align_up(scratch_offset_ + scratch_bytes_);
  arena_ = backend_.allocate(clip_offset_ + kRegionAlign, fmt::format("{} run memory", L_.config.name));
  if (backend_.native_stream() != 0) {
    gemm_workspace_ = backend_.allocate(kCublasLtWorkspaceBytes, "cuBLASLt workspace");
    gemm_ = make_cublaslt_gemm(backend_, *gemm_workspace_, options_.mode == Mode::kCompiled, options_.tuned,
                               options_.gemm_store, options_.deterministic);
  } else {
    gemm_ = make_host_gemm(backend_, *arena_);
  }
}

DeviceOps::~DeviceOps() = default;

std::size_t DeviceOps::allocated_bytes() const {
  return arena_->bytes() + (gemm_workspace_ ? gemm_workspace_->bytes() : 0);
}

std::uint64_t DeviceOps::address(Ref at) const {
  return arena_->address() + region_offset_[static_cast<int>(at.region)] +
         static_cast<std::uint64_t>(at.offset) * unit_bytes(at.region);
}

void DeviceOps::upload(Ref at, const void* host, std::size_t bytes) {
  backend_.upload_range(*arena_, address(at) - arena_->address(), host, bytes);
}

void DeviceOps::download(void* host, Ref at, std::size_t bytes) {
  backend_.download_range(host, *arena_, address(at) - arena_->address(), bytes);
}

void DeviceOps::poison() { backend_.poison(*arena_); }

std::size_t DeviceOps::unit_bytes(Region r) const {
  switch (r) {
    case Region::kLayers:
    case Region::kFinal:
    case Region::kWork:
    case Region::kScratch:  // Refs into the scratch name dS, an activation gradient
      return static_cast<std::size_t>(layout_unit_bytes(L_.precision));
    case Region::kWeightsBf16:
      return 2;
    default:
      return kFloatBytes;
  }
}

// A GEMM operand's type: in bf16 every operand but the fp32 gradients (dW,
// the GEMMs' only fp32 output) is a bf16 activation or the weights' bf16
// copy; the master weights are never a GEMM operand there.
templates::DType DeviceOps::gemm_type(Ref at) const {
  if (L_.precision != Precision::kBf16) return templates::DType::kF32;
  KTUNE_REQUIRE(at.region != Region::kParams,
                "bf16 GEMMs read the weights' bf16 copy (StepLayout::weight), not the fp32 master weights");
  return at.region == Region::kGrads ? templates::DType::kF32 : templates::DType::kBF16;
}


std::uint64_t DeviceOps::scratch(std::size_t bytes, std::size_t kept) const {
  const std::size_t at = align_up(kept);
  KTUNE_REQUIRE(at + bytes <= scratch_bytes_,
                fmt::format("an op needs {} bytes of scratch after {}; the run planned {}", bytes, at, scratch_bytes_));
  return arena_->address() + scratch_offset_ + at;
}

const tuner::TunedKernel& DeviceOps::kernel(const templates::Family& family, const Problem& problem) {
  for (const auto& k : kernels_->kernels())
    if (k.family == &family && k.problem == problem) return k;
  kernels_->prepare({{&family, problem}}, options_.compile_threads);
  return kernels_->get(family, problem);
}

void DeviceOps::launch(const tuner::TunedKernel& k, const std::vector<templates::Launch>& plan) {
  backend_.launch(*k.module, plan);
  const auto n = static_cast<std::int64_t>(plan.size());
  launches_.kernels += n;
  launches_.by_family[k.family->name()] += n;
}

template <class Args>
void DeviceOps::run(const templates::TypedFamily<Args>& f, const Problem& p, Args args, std::size_t kept) {
  if (runs_as_chain(options_.mode, f, options_.deterministic)) {
    if constexpr (requires { templates::eager::bind(args); }) {
      run_chain(f, p, kept, templates::eager::bind(args));
      return;
    } else {
      throw_error(ErrorKind::kInternal,
                  fmt::format("eager {} has a chain but eager::bind has no face for its arguments", f.name()));
    }
  }
  const auto& k = kernel(f, p);
  if constexpr (requires { args.workspace; })
    args.workspace = scratch(f.workspace_bytes(k.chosen.config, p), kept);
  launch(k, f.plan(k.chosen.config, p, args, backend_.device()));
}

const tr::adamw::AdamwFamily& DeviceOps::adamw_family() const {
  return options_.mode == Mode::kEager ? tr::adamw::eager_family() : tr::adamw::multi_tensor_family();
}

void DeviceOps::rope_tables(Ref cos, Ref sin, std::int64_t seq, std::int64_t head_dim, double theta) {
  const std::size_t n = static_cast<std::size_t>(seq * head_dim / 2);
  std::vector<float> c(n), s(n);
  tr::rope::rope_tables<float>(seq, head_dim, theta, c.data(), s.data());
  upload(cos, c.data(), n * kFloatBytes);
  upload(sin, s.data(), n * kFloatBytes);
}

void DeviceOps::gemm(const GemmOp& g) {
  ++launches_.gemms;
  gemm_->gemm({.trans_a = g.trans_a, .trans_b = g.trans_b, .m = g.m, .n = g.n, .k = g.k, .a = address(g.a),
               .b = address(g.b), .c = address(g.c), .lda = g.lda, .ldb = g.ldb, .ldc = g.ldc,
               .alpha = static_cast<float>(g.alpha), .beta = static_cast<float>(g.beta), .batch = g.batch,
               .stride_a = g.stride_a, .stride_b = g.stride_b, .stride_c = g.stride_c,
               .a_type = gemm_type(g.a), .b_type = gemm_type(g.b), .c_type = gemm_type(g.c),
               .tf32 = L_.precision == Precision::kTf32});
}

void DeviceOps::embedding_forward(Ref tokens, Ref table, Ref out, std::int64_t rows, std::int64_t dim,
                                  std::int64_t vocab) {
  run(tr::embedding::forward_family(), embed_problem(dtype_, rows, dim, vocab),
      {.tokens = address(tokens), .table = address(table), .out = address(out)});
}

void DeviceOps::embedding_backward(Ref tokens, Ref dout, Ref dtable, std::int64_t rows, std::int64_t dim,
                                   std::int64_t vocab) {
  run(tr::embedding::backward_family(), embed_problem(dtype_, rows, dim, vocab),
      {.tokens = address(tokens), .d_out = address(dout), .d_table = address(dtable)});
}

void DeviceOps::rmsnorm_forward(Ref x, Ref w, Ref y, Ref rstd, std::int64_t rows, std::int64_t dim, double) {
  run(tr::rmsnorm::forward_family(), rows_problem(dtype_, rows, dim),
      {.x = address(x), .w = address(w), .y = address(y), .rstd = address(rstd)});
}

void DeviceOps::rmsnorm_backward(Ref x, Ref w, Ref rstd, Ref dy, Ref dx, Ref dw, std::int64_t rows,
                                 std::int64_t dim) {
  run(tr::rmsnorm::backward_family(), rows_problem(dtype_, rows, dim),
      {.x = address(x), .w = address(w), .rstd = address(rstd), .dy = address(dy), .dx = address(dx),
       .dw = address(dw)});
}

// Compiled: the fused family, one pass; eager: its chain, the add as its
// own kernel, then RMSNorm's chain (the backward: RMSNorm's, then the add).
void DeviceOps::residual_rmsnorm_forward(Ref x, Ref r, Ref w, Ref h, Ref y, Ref rstd, std::int64_t rows,
                                         std::int64_t dim, double) {
  run(tr::rmsnorm::residual_forward_family(), rows_problem(dtype_, rows, dim),
      {.x = address(x), .r = address(r), .w = address(w), .h = address(h), .y = address(y),
       .rstd = address(rstd)});
}

void DeviceOps::residual_rmsnorm_backward(Ref h, Ref w, Ref rstd, Ref dy, Ref dstream, Ref dh, Ref dw,
                                          std::int64_t rows, std::int64_t dim) {
  run(tr::rmsnorm::residual_backward_family(), rows_problem(dtype_, rows, dim),
      {.h = address(h), .w = address(w), .rstd = address(rstd), .dy = address(dy), .dstream = address(dstream),
       .dh = address(dh), .dw = address(dw)});
}

namespace {

// Eager mode's chains (PyTorch eager's ops on q and k) and materialised
// attention read separate q, k and v: only compiled mode's fused kernels take
// rows further apart (StepLayout::fused_qkv).
void require_rows(bool fused_kernels, std::int64_t rows, std::int64_t contiguous, const char* op) {
  if (rows != contiguous && !fused_kernels)
    throw_error(ErrorKind::kInternal, fmt::format("DeviceOps::{}: rows {} apart need the fused kernels", op, rows));
}

}  // namespace

void DeviceOps::rope_forward(Ref x, Ref cos, Ref sin, std::int64_t tokens, std::int64_t seq, std::int64_t heads,
                             std::int64_t head_dim, std::int64_t row_stride) {
  require_rows(options_.mode == Mode::kCompiled, row_stride, heads * head_dim, "rope_forward");
  run(tr::rope::forward_family(), rope_problem(dtype_, tokens, seq, heads, head_dim),
      {.x = address(x), .cos = address(cos), .sin = address(sin), .y = address(x), .row_stride = row_stride});
}

void DeviceOps::rope_backward(Ref dx, Ref cos, Ref sin, std::int64_t tokens, std::int64_t seq, std::int64_t heads,
                              std::int64_t head_dim, std::int64_t row_stride) {
  require_rows(options_.mode == Mode::kCompiled, row_stride, heads * head_dim, "rope_backward");
  run(tr::rope::backward_family(), rope_problem(dtype_, tokens, seq, heads, head_dim),
      {.dy = address(dx), .cos = address(cos), .sin = address(sin), .dx = address(dx), .row_stride = row_stride});
}

namespace {

// Strides of q, k or v (B, S, H, D) whose tokens' rows are `row` elements apart.
templates::attention::TensorStrides qkv_strides(const templates::attention::AttentionShape& s, std::int64_t row) {
  return {.batch = s.seq * row, .head = s.head_dim, .seq = row};
}

// Materialised attention's GEMMs over the (batch, head) pairs: a call per
// batch b, batched over its heads (a head's rows start D apart in (B, S, H, D),
// P_bh S x S apart), or with one head, one call batched over the batch (S x D
// apart), as PyTorch's matmul over (B, S, D).
struct HeadBatches {
  std::int64_t calls, batch, stride;  // GEMM calls, entries per call, an entry's stride in (B, S, H, D)
};
HeadBatches head_batches(const templates::attention::AttentionShape& s) {
  if (s.heads == 1) return {1, s.batch, s.seq * s.head_dim};
  return {s.batch, s.heads, s.head_dim};
}

}  // namespace

// Flash attention (the layout keeps the log-sum-exp): attention_fwd on q, k,
// v, out in their (B, S, H, D) layout (q, k and v rows qkv_row apart, o's
// contiguous), `saved` its (B, H, S) fp32 lse.
// Otherwise materialised attention, per batch b and head h (P: (B, H, S, S)):
//   P_bh = softmax(scale Q_bh K_bh^T, causal),  O_bh = P_bh V_bh.
void DeviceOps::attention_forward(Ref q, Ref k, Ref v, Ref saved, Ref out,
                                  const templates::attention::AttentionShape& s, std::int64_t qkv_row) {
  const bool flash = L_.attention == AttentionSaved::kLogSumExp;
  require_rows(flash, qkv_row, s.heads * s.head_dim, "attention_forward");
  if (flash) {
    const auto strides = tr::attention::bshd_strides(s);
    const auto rows = qkv_strides(s, qkv_row);
    run(tr::attention::forward_family(), flash_attention_problem(s, dtype_),
        {.q = address(q), .k = address(k), .v = address(v), .o = address(out), .lse = address(saved),
         .q_strides = rows, .k_strides = rows, .v_strides = rows, .o_strides = strides,
         .scale = tr::attention::default_scale(s.head_dim)});
    return;
  }
  const std::int64_t S = s.seq, H = s.heads, D = s.head_dim, row = H * D;
  const HeadBatches hb = head_batches(s);
  for (std::int64_t b = 0; b < hb.calls; ++b) {
    const std::int64_t x = b * S * row, pb = b * H * S * S;
    gemm({.trans_a = false, .trans_b = true, .m = S, .n = S, .k = D, .a = q + x, .b = k + x, .c = saved + pb,
          .lda = row, .ldb = row, .ldc = S, .batch = hb.batch, .stride_a = hb.stride, .stride_b = hb.stride,
          .stride_c = S * S});
  }
  attention_softmax(saved, s);
  for (std::int64_t b = 0; b < hb.calls; ++b) {
    const std::int64_t x = b * S * row, pb = b * H * S * S;
    gemm({.trans_a = false, .trans_b = false, .m = S, .n = D, .k = S, .a = saved + pb, .b = v + x, .c = out + x,
          .lda = S, .ldb = row, .ldc = row, .batch = hb.batch, .stride_a = S * S, .stride_b = hb.stride,
          .stride_c = hb.stride});
  }
}

void DeviceOps::attention_softmax(Ref scores, const templates::attention::AttentionShape& s) {
  run(tr::softmax::forward_family(), attention_scores_problem(s, dtype_),
      {.x = address(scores), .y = address(scores), .scale = tr::attention::default_scale(s.head_dim)});
}

// Backward of the above: attention_bwd from O and the lse (its workspace in
// the scratch); materialised, with dS (B, H, S, S) in the scratch:
//   dP = dO V^T,  dV = P^T dO,  dS = scale P (dP - rowsum(dP P)),  dQ = dS K,  dK = dS^T Q.
void DeviceOps::attention_backward(Ref q, Ref k, Ref v, Ref out, Ref saved, Ref dout, Ref dq, Ref dk, Ref dv,
                                   const templates::attention::AttentionShape& s, std::int64_t qkv_row) {
  const bool flash = L_.attention == AttentionSaved::kLogSumExp;
  require_rows(flash, qkv_row, s.heads * s.head_dim, "attention_backward");
  if (flash) {
    const auto strides = tr::attention::bshd_strides(s);
    const auto rows = qkv_strides(s, qkv_row);
    run(tr::attention::backward_family(), flash_attention_problem(s, dtype_),  // its workspace in the scratch
        {.q = address(q), .k = address(k), .v = address(v), .o = address(out), .lse = address(saved),
         .dout = address(dout), .dq = address(dq), .dk = address(dk), .dv = address(dv), .q_strides = rows,
         .k_strides = rows, .v_strides = rows, .o_strides = strides, .do_strides = strides,
         .dq_strides = rows, .dk_strides = rows, .dv_strides = rows,
         .scale = tr::attention::default_scale(s.head_dim)});
    return;
  }
  const std::int64_t S = s.seq, H = s.heads, D = s.head_dim, row = H * D;
  const std::size_t ds_bytes = static_cast<std::size_t>(s.batch * H * S * S) * unit_bytes(Region::kScratch);
  const std::uint64_t ds_address = scratch(ds_bytes);
  const Ref ds{Region::kScratch, 0};
  const HeadBatches hb = head_batches(s);
  for (std::int64_t b = 0; b < hb.calls; ++b) {
    const std::int64_t x = b * S * row, pb = b * H * S * S;
    gemm({.trans_a = false, .trans_b = true, .m = S, .n = S, .k = D, .a = dout + x, .b = v + x, .c = ds + pb,
          .lda = row, .ldb = row, .ldc = S, .batch = hb.batch, .stride_a = hb.stride, .stride_b = hb.stride,
          .stride_c = S * S});
    gemm({.trans_a = true, .trans_b = false, .m = S, .n = D, .k = S, .a = saved + pb, .b = dout + x, .c = dv + x,
          .lda = S, .ldb = row, .ldc = row, .batch = hb.batch, .stride_a = S * S, .stride_b = hb.stride,
          .stride_c = hb.stride});
  }
  run(tr::softmax::backward_family(), attention_scores_problem(s, dtype_),
      {.y = address(saved), .dy = ds_address, .dx = ds_address, .scale = tr::attention::default_scale(D)},
      ds_bytes);
  for (std::int64_t b = 0; b < hb.calls; ++b) {
    const std::int64_t x = b * S * row, pb = b * H * S * S;
    gemm({.trans_a = false, .trans_b = false, .m = S, .n = D, .k = S, .a = ds + pb, .b = k + x, .c = dq + x,
          .lda = S, .ldb = row, .ldc = row, .batch = hb.batch, .stride_a = S * S, .stride_b = hb.stride,
          .stride_c = hb.stride});
    gemm({.trans_a = true, .trans_b = false, .m = S, .n = D, .k = S, .a = ds + pb, .b = q + x, .c = dk + x,
          .lda = S, .ldb = row, .ldc = row, .batch = hb.batch, .stride_a = S * S, .stride_b = hb.stride,
          .stride_c = hb.stride});
  }
}

void DeviceOps::swiglu_forward(Ref a, Ref b, Ref h, std::int64_t n) {
  run(tr::swiglu::forward_family(), gate_problem(dtype_, n), {.a = address(a), .b = address(b), .h = address(h)});
}

void DeviceOps::swiglu_backward(Ref a, Ref b, Ref dh, Ref da, Ref db, std::int64_t n) {
  run(tr::swiglu::backward_family(), gate_problem(dtype_, n),
      {.a = address(a), .b = address(b), .dh = address(dh), .da = address(da), .db = address(db)});
}

void DeviceOps::cross_entropy_forward(Ref logits, Ref targets, Ref losses, Ref lse, std::int64_t rows,
                                      std::int64_t vocab) {
  run(tr::cross_entropy::forward_family(), loss_problem(dtype_, rows, vocab),
      {.logits = address(logits), .targets = address(targets), .losses = address(losses), .lse = address(lse)});
}

void DeviceOps::cross_entropy_backward(Ref logits, Ref targets, Ref lse, Ref dlogits, std::int64_t rows,
                                       std::int64_t vocab, std::int64_t mean_over) {
  run(tr::cross_entropy::backward_family(), loss_problem(dtype_, rows, vocab),
      {.logits = address(logits), .targets = address(targets), .lse = address(lse), .dlogits = address(dlogits),
       .scale = 1.0f / static_cast<float>(mean_over)});
}

void DeviceOps::accumulate(Ref x, Ref y, std::int64_t n) {
  // The primitive add (as torch's grad += in a backward that accumulates), in place.
  run(tr::eager::binary_family(tr::eager::Binary::kAdd), accumulate_problem(n),
      tr::eager::PrimArgs{.x = address(y), .b = address(x), .y = address(y)});
}

double DeviceOps::mean(Ref values, std::int64_t n) {
  std::vector<float> host(static_cast<std::size_t>(n));
  download(host.data(), values, host.size() * kFloatBytes);  // the losses are fp32 in every precision
  double sum = 0;
  for (const float v : host) sum += static_cast<double>(v);
  return sum / static_cast<double>(n);
}

void DeviceOps::adamw_step(const std::vector<AdamwTensor>& tensors, const templates::adamw::AdamwHyper& hyper) {
  const auto& f = adamw_family();
  const auto& k = kernel(f, adamw_problem(L_.config, L_.precision));
  // bf16: the step also writes the weights' bf16 copy that the GEMMs read.
  const bool copy = L_.precision == Precision::kBf16;
  std::vector<tr::adamw::TensorAddresses> list;
  std::int64_t largest = 0;
  for (const auto& t : tensors) {
    KTUNE_REQUIRE(t.param.region == Region::kParams, "AdamW steps the master weights (Region::kParams)");
    list.push_back({.param = address(t.param), .grad = address(t.grad), .exp_avg = address(t.exp_avg),
                    .exp_avg_sq = address(t.exp_avg_sq),
                    .param_bf16 = copy ? address(L_.weight(t.param.offset)) : 0, .numel = t.numel});
    largest = std::max(largest, t.numel);
  }
  // Clip-by-norm: grad_norm writes (norm, clip factor) in the arena's tail,
  // with no sync to the host. The fused AdamW reads
  // the norm there as it reads each gradient; eager AdamW does not clip, so
  // grad_norm scales the gradients in place first (its own launch).
  tr::adamw::Clip clip;
  clipped_ = hyper.max_grad_norm > 0;
  if (clipped_) {
    const bool in_place = options_.mode == Mode::kEager;
    const std::uint64_t out = arena_->address() + clip_offset_;
    std::vector<tr::grad_norm::Tensor> grads;
    for (const auto& t : list) grads.push_back({.grad = t.grad, .numel = t.numel});
    // The problem stands for the model's tensors in the tuned cache; the
    // partials are those of the tensors themselves.
    const auto& norm = tr::grad_norm::family();
    const Problem p = grad_norm_problem(L_.config, in_place);
    const auto& nk = kernel(norm, p);
    tr::grad_norm::Args args{.tensors = grads, .out = out, .max_norm = hyper.max_grad_norm, .clip = in_place};
    args.workspace = scratch(static_cast<std::size_t>(tr::grad_norm::partial_floats(nk.chosen.config, grads)) *
                             kFloatBytes);
    launch(nk, norm.plan(nk.chosen.config, p, args, backend_.device()));
    if (!in_place) clip = {.norm = out, .max_norm = hyper.max_grad_norm};
  }
  const std::uint64_t ws =
      options_.mode == Mode::kEager ? scratch(static_cast<std::size_t>(largest) * kFloatBytes) : 0;
  launch(k, f.plan_tensors(k.chosen.config, copy, list, ws, hyper, backend_.device(), clip));
}

std::optional<double> DeviceOps::clipped_norm() {
  if (!clipped_) return std::nullopt;
  float norm = 0;  // grad_norm's out[0]
  backend_.download_range(&norm, *arena_, clip_offset_, sizeof norm);
  return norm;
}

}  // namespace ktune::model
