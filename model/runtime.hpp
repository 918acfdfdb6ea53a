// One Transformer instance on a chosen backend, behind one face for the
// training loop, evaluation and the end-to-end benchmark:
//   cpu   Transformer<float> (host memory, references, OpenBLAS) and AdamW
//   cuda  DeviceTransformer on the CUDA backend (kernels via NVRTC, cuBLASLt)
//   emu   DeviceTransformer on the host emulation (CI's check of the cuda path)
// All three run the same walk (model/walk.hpp).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/memory_plan.hpp"
#include "model/ops/device_ops.hpp"
#include "model/transformer.hpp"

namespace ktune::model {

/// Where and how a model runs.
struct BackendOptions {
  std::string backend = "cpu";  ///< cpu | cuda | emu
  Mode mode = Mode::kCompiled;  ///< device backends only
  Precision precision = Precision::kF32;  ///< f32 on cpu; f32, tf32 or bf16 on the device backends
  std::string cache;            ///< tuned cache file for compiled mode (empty: family defaults)
  unsigned threads = 1;         ///< cpu backend threads
  unsigned emu_workers = 0;     ///< emu: OS threads running blocks (0: one per hardware thread)
  bool graphs = false;          ///< compiled mode on a device backend: passes replayed as graphs (DeviceOptions)
  bool programmatic = false;    ///< device backends: programmatic dependent launch (Backend::set_programmatic)
  bool nvtx = false;            ///< NVTX ranges around each phase, block and op (model/nvtx.hpp), for nsys
  /// Device backends: the same bits run after run (DeviceOptions::deterministic);
  /// the cpu backend's are already, at any thread count.
  bool deterministic = false;
};

/// "cpu", "cuda" or "emu"; throws kInvalidInput naming the accepted ones.
void check_backend_name(const std::string& backend);

/// The memory plan of a run of `config` at `shape` on `options`' backend, as
/// it allocates: its threads' scratch (plan_threads), what each block keeps
/// for the attention backward (attention_saved: flash in compiled mode on a
/// device backend), each buffer in the precision's dtype.
MemoryPlan plan_run(const ModelConfig& config, const RunShape& shape, const BackendOptions& options);

/// Bytes a run's memory plan on `options`' backend may take now: on cuda the
/// GPU's free memory less cuBLASLt's workspace (throws kNoDevice without a
/// GPU), else the host's available memory (0: unknown).
std::int64_t available_memory(const BackendOptions& options);

/// least_recompute (memory_plan.hpp) over the plans of a run on `options`'
/// backend (plan_run) at `shape` with each level; shape.recompute is not
/// read. Blocks when none fits: the run's memory check then says what would.
Recompute least_recompute(const ModelConfig& config, RunShape shape, const BackendOptions& options,
                          std::int64_t available, Allocation allocation = Allocation::kTrain);

class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual double forward(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets) = 0;
  /// The logits (vocab values, fp32) the last forward computed for token
  /// `row` of its batch; a backward overwrites them.
  virtual std::vector<float> logits(std::int64_t row) = 0;
  /// The per-token losses of the last forward, (batch, context), whose mean it returned.
  virtual std::vector<float> token_losses() = 0;
  /// Gradients of the last forward's loss, its mean over the step's tokens
  /// (RunShape::micro_batches): written over the gradients, or with
  /// `accumulate` added to them (each micro-batch after a step's first).
  virtual void backward(bool accumulate = false) = 0;
  /// One AdamW step (the step counter is the runtime's).
  virtual void step(const templates::adamw::AdamwHyper& hyper) = 0;
  /// Waits for enqueued work (what a timer must do before reading the clock).
  virtual void synchronize() = 0;

  virtual std::vector<float> parameters() = 0;
  virtual void set_parameters(std::span<const float> values) = 0;
  virtual std::vector<float> gradients() = 0;
  /// AdamW's moments and steps taken, as a checkpoint keeps them; a run
  /// built for training only.
  virtual OptimizerState optimizer_state() = 0;
  virtual void set_optimizer_state(const OptimizerState& state) = 0;
  /// The global L2 norm of the gradients the last step clipped by
  /// (AdamwHyper::max_grad_norm > 0), before clipping; nullopt before a
  /// step or after one that did not clip. On a device, a wait for the step.
  virtual std::optional<double> grad_norm() = 0;
  virtual const ModelConfig& config() const = 0;
  virtual const ParameterLayout& layout() const = 0;

  /// Bytes of the run's memory (host for cpu, device otherwise).
  virtual std::int64_t allocated_bytes() const = 0;
  /// The device in words ("AMD EPYC ... (2 threads)", "emulated sm_90", ...).
  virtual std::string device() const = 0;
  /// Where each kernel's config came from, for a person: "12 kernels: 3 exact,
  /// 1 nearest (rope_fwd), 8 default; GEMMs: cuBLASLt ..." (where a cache
  /// served some, up to 4 nearest or default ones named); empty on cpu.
  virtual std::string kernel_summary() const = 0;
  /// The same, kernel by kernel, for a program (bench e2e --json): empty on cpu.
  struct KernelChoice {
    std::string family, problem;  ///< the family and its problem key
    std::string config;           ///< the config run, as JSON text
    std::string match;            ///< "exact", "nearest" or "default"
    std::string source;           ///< why, as the kernel line's words ("nearest (distance 1.00, tuned for ...)")
    std::string other_gpu;        ///< a nearest entry tuned on another GPU of the arch: its name
  };
  virtual std::vector<KernelChoice> kernel_choices() const { return {}; }
  /// Warnings a person should see (stale cache entries).
  virtual std::vector<std::string> warnings() const = 0;
  /// The nodes of the passes' graphs, 0 for a pass not captured (yet: a pass
  /// is captured on its second run); nullopt where the passes run op by op
  /// (no graphs asked for, cpu).
  struct GraphNodes {
    std::size_t forward = 0;
    std::size_t backward = 0;
    /// What was captured, in words: "no graph captured: no pass ran twice",
    /// "the forward a graph of N nodes" (with the backward's absence said
    /// unless the runtime runs the forward alone), "graphs of N (forward) and
    /// M (backward) nodes".
    std::string str(bool forward_only) const;
  };
  virtual std::optional<GraphNodes> graph_nodes() const { return std::nullopt; }

  /// A mark after the work enqueued so far, for timing phases: a CUDA event
  /// on the backend's stream (cuda), the host clock after waiting (cpu, emu).
  virtual std::unique_ptr<tuner::exec::Mark> mark() {
    synchronize();
    return tuner::exec::host_mark();
  }
  /// Milliseconds between two marks of this runtime; waits for `to`.
  virtual double elapsed_ms(const tuner::exec::Mark& from, const tuner::exec::Mark& to) {
    return tuner::exec::host_elapsed_ms(from, to);
  }
  /// What mark() reads, for a person.
  virtual std::string clock() const { return "host clock"; }
  /// Device memory in use now that was free before the runtime was made
  /// (cuMemGetInfo, so other processes' allocations count too); nullopt
  /// without device memory of its own (cpu, emu).
  virtual std::optional<std::int64_t> device_bytes_in_use() const { return std::nullopt; }
  /// The CUDA driver version ("13000"); empty without a GPU.
  virtual std::string driver() const { return ""; }
  /// Kernel launches and GEMM calls enqueued so far (take the difference of
  /// two readings for a step); nullopt on cpu, which launches nothing.
  virtual std::optional<LaunchCount> launches() const = 0;
  /// Times every op of the passes that follow into `profile` (nullptr: none),
  /// with this runtime's marks.
  virtual void set_profile(OpProfile* profile) = 0;
  /// The clock `mark` and `elapsed_ms` read, for an OpProfile of this runtime.
  OpClock op_clock() {
    return {[this] { return mark(); },
            [this](const tuner::exec::Mark& from, const tuner::exec::Mark& to) { return elapsed_ms(from, to); }};
  }
};

/// A model on `options.backend`, its parameters at the CS336 initialisation
/// with seed 0; NVTX ranges on for the process as options.nvtx says. Throws
/// kNoDevice for cuda without a usable GPU, kInvalidInput for an unknown
/// backend, a cache given to the cpu backend, a precision the backend does
/// not run (the cpu backend runs f32 only), graphs outside compiled mode on a
/// device backend, programmatic launch on the cpu backend, or (cuda, before
/// anything is allocated) a memory plan whose peak does not fit in the GPU's
/// free memory.
std::unique_ptr<Runtime> make_runtime(const ModelConfig& config, const RunShape& shape, Allocation allocation,
                                      const BackendOptions& options);

}  // namespace ktune::model
