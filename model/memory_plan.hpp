// The static memory plan of one run: shapes are fixed, so every buffer is
// laid out once and reused every step. The plan is computed without
// allocating (`ktune bench memory`), and the cpu backend allocates exactly
// what it says, so the reported bytes are the bytes in use. Every buffer has
// a dtype: in f32 and tf32 runs all are fp32 (or the cpu backend's value
// type); in bf16 mixed precision the activations and their gradients are
// bf16 and the statistics (rstd, log-sum-exps, losses), the RoPE tables,
// master weights, gradients and AdamW state fp32, plus a bf16 weight copy.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/precision.hpp"
#include "templates/attention/reference.hpp"

namespace ktune::model {

/// What a model instance is allocated for; MemoryPlan::peak says its bytes.
enum class Allocation {
  kForwardOnly,  ///< one block's activations, reused by every block; no gradients
  kGradients,    ///< every block's activations kept, gradients and backward workspace; no optimizer state (a
                 ///< forward and backward without a step: eval's gradients, bench's forward+backward)
  kTrain,        ///< kGradients and AdamW's moments: a training step
};

/// Offsets of the activations of one block, in one slot (in the layout's
/// units, layout_unit_bytes: elements in f32).
/// N = batch*context tokens, C = d_model, F = d_ff, H heads, S = context.
struct LayerLayout {
  std::int64_t x_in = 0;   // (N, C) residual stream entering the block
  std::int64_t ln1 = 0;    // (N, C) RMSNorm 1 output, input of q/k/v
  std::int64_t rstd1 = 0;  // (N,)
  std::int64_t q = 0;      // (N, H, C/H) after RoPE
  std::int64_t k = 0;      // (N, H, C/H) after RoPE
  std::int64_t v = 0;      // (N, H, C/H)
  std::int64_t attn_saved = 0;  // what the attention backward needs (AttentionSaved): (B, H, S, S)
                                // probabilities, or with flash attention the (B, H, S) log-sum-exp
  std::int64_t attn = 0;   // (N, C) attention output, input of output_proj
  std::int64_t x_mid = 0;  // (N, C) stream after the attention residual
  std::int64_t ln2 = 0;    // (N, C) RMSNorm 2 output, input of w1/w3
  std::int64_t rstd2 = 0;  // (N,)
  std::int64_t a = 0;      // (N, F) W1 x
  std::int64_t b = 0;      // (N, F) W3 x
  std::int64_t h = 0;      // (N, F) silu(a) * b, input of w2
  std::int64_t size = 0;   // elements of one slot
  std::int64_t bf16_bytes = 0;  // bytes of one slot with bf16 activations (statistics fp32)
  /// Units of the slot's first buffers that each block keeps when a run
  /// recomputes the rest (the buffers are in the order the backward can
  /// recompute them from the ones before): all but h (Recompute::kSwiglu),
  /// x_in, ln1 and rstd1 (kBlocks), the whole slot (kNone).
  std::int64_t kept(Recompute recompute) const;
};

/// Offsets of the activations after the last block.
struct FinalLayout {
  std::int64_t x = 0;       // (N, C) stream after the last block
  std::int64_t ln = 0;      // (N, C) final RMSNorm output, input of lm_head
  std::int64_t rstd = 0;    // (N,)
  std::int64_t logits = 0;  // (N, V); the backward overwrites it with dlogits
  std::int64_t losses = 0;  // (N,)
  std::int64_t lse = 0;     // (N,) logsumexp per row
  std::int64_t size = 0;
  std::int64_t bf16_bytes = 0;  // with bf16 activations (x, ln, logits)
};

/// Offsets of the workspace: per-thread scratch for the forward, and the
/// activation gradients for the backward (0-sized when forward-only).
struct WorkspaceLayout {
  std::int64_t rope_cos = 0;      // (S, C/H/2) RoPE tables
  std::int64_t rope_sin = 0;      // (S, C/H/2)
  std::int64_t attn_scratch = 0;  // (threads, attention_scratch_elements) the cpu backend's attention backward
  std::int64_t dx = 0;            // (N, C) gradient of the residual stream
  std::int64_t dtmp = 0;          // (N, C) gradient at a norm output
  std::int64_t dbranch = 0;       // (N, C) gradient of attn, the attention branch's output
  std::int64_t dq = 0, dk = 0, dv = 0;  // (N, C) each
  std::int64_t dh = 0;            // (N, F) gradient of h, then of a (in place)
  std::int64_t db = 0;            // (N, F)
  std::int64_t norm_dw = 0;       // (kNormDwChunks, C) the cpu backend's RMSNorm weight grads, a partial sum per
                                  // chunk of rows (none in a device's plan, threads 0, nor attn_scratch)
  std::int64_t dparam = 0;        // (V, C) fp32, when a step accumulates micro-batches: a gradient that no GEMM
                                  // writes (the embedding's, a norm's), before it is added to the step's; last,
                                  // so the buffers before it lie where they would without it
  std::int64_t size = 0;
  std::int64_t bf16_bytes = 0;    // with bf16 activation gradients (tables, scratch, norm_dw fp32)
};

/// One buffer a layout hands out, in its order: the layout's field, what it
/// holds, its shape, whether it stays fp32 in bf16 mixed precision
/// (statistics, tables, per-thread scratch), its elements rounded up to the
/// layout's alignment, and its offset (in the layout's units).
struct LaidOut {
  const char* name;
  const char* what;
  std::vector<std::int64_t> shape;
  bool fp32 = false;
  std::int64_t aligned_elements = 0;
  std::int64_t offset = 0;
};
using LayoutListing = std::vector<LaidOut>;

/// Chunks of rows the cpu backend's RMSNorm backward sums its weight
/// gradients over, each into a partial of its own, then the partials in
/// order: the same sums whatever the thread count (threads take chunks).
constexpr std::int64_t kNormDwChunks = 64;
/// Query rows the cpu backend's attention takes at a time (its GEMMs' rows).
constexpr std::int64_t kAttentionRowBlock = 64;
/// Values of the cpu backend's attention scratch per thread, what its
/// backward needs: one block of query rows' dP (then dS) over the keys.
std::int64_t attention_scratch_elements(const templates::attention::AttentionShape& s);

/// The bytes of one unit of a layout's offsets and sizes: 4 (one fp32
/// element) in f32 and tf32; 2 in bf16, where a bf16 buffer's offsets count
/// its elements and an fp32 buffer takes two units per element.
std::int64_t layout_unit_bytes(Precision precision);

/// The layouts of a run in `precision`, offsets and size in its units
/// (layout_unit_bytes); bf16_bytes is the bf16 plan's bytes whatever the
/// precision. With `listing`, each buffer is also appended to it.
LayerLayout layer_layout(const ModelConfig& m, const RunShape& r,
                         AttentionSaved attention = AttentionSaved::kProbabilities,
                         Precision precision = Precision::kF32, LayoutListing* listing = nullptr);
FinalLayout final_layout(const ModelConfig& m, const RunShape& r, Precision precision = Precision::kF32,
                         LayoutListing* listing = nullptr);
WorkspaceLayout workspace_layout(const ModelConfig& m, const RunShape& r, unsigned threads, bool backward,
                                 Precision precision = Precision::kF32, LayoutListing* listing = nullptr);
/// Whether these layouts put k right after q's (tokens, d_model) elements,
/// and dk right after dq's, with no padding between (every buffer starts
/// aligned, so only where tokens * d_model is a multiple of the alignment):
/// then one RoPE launch over 2 * tokens rotates both, token t of the pair
/// at position t % context as each alone.
bool rope_pairs_adjacent(const ModelConfig& m, const RunShape& r, Precision precision, AttentionSaved attention);
/// Whether these layouts hold q, k, v (and dq, dk, dv) back to back with no
/// padding, so their 3 N C elements can be read as one fused projection's
/// (N, 3 C) rows, [q | k | v] per token, with every view 16-byte aligned
/// (d_model x element bytes a multiple of 16), and attention is flash
/// attention, which reads q, k, v and writes dq, dk, dv with any row stride.
bool qkv_fusable(const ModelConfig& m, const RunShape& r, Precision precision, AttentionSaved attention);

/// Bytes per phase and the peaks: `element_bytes`-sized values (4: fp32)
/// in f32 and tf32, each buffer's dtype in bf16.
struct MemoryPlan {
  ModelConfig model;
  RunShape shape;
  unsigned threads = 1;
  std::int64_t element_bytes = 4;
  AttentionSaved attention = AttentionSaved::kProbabilities;
  Precision precision = Precision::kF32;

  std::int64_t parameters = 0;            ///< bytes of the parameters (bf16: the fp32 master weights)
  std::int64_t weight_copy = 0;           ///< bf16: the weights' bf16 copy the GEMMs read (0 otherwise)
  std::int64_t gradients = 0;             ///< bytes of their gradients
  std::int64_t optimizer_state = 0;       ///< AdamW exp_avg + exp_avg_sq
  std::int64_t inputs = 0;                ///< tokens and targets (int32)
  std::int64_t activations_forward = 0;   ///< forward-only: one block slot + final
  std::int64_t activations_backward = 0;  ///< kept for backward: every block's kept part, the rest of one
                                          ///< slot (shared, recomputed), final
  std::int64_t per_layer_activations = 0; ///< one block's slot
  std::int64_t per_layer_kept = 0;        ///< of it, what each block keeps (shape.recompute; kNone: all)
  std::int64_t workspace_forward = 0;     ///< forward scratch
  std::int64_t workspace_backward = 0;    ///< forward scratch + activation gradients
  /// A device backend's (threads 0) ops' own scratch for a forward and backward, what the shapes fix of it:
  /// materialised attention's backward dS, (B, H, S, S) of the activations' type; with plan_run, the eager
  /// chains' temporaries too (planned_scratch_bytes; a tuned kernel's workspace may take more).
  std::int64_t scratch = 0;
  std::int64_t forward_scratch = 0;  ///< the same for a forward alone (plan_run: the eager forward chains')
  std::int64_t step_scratch = 0;     ///< the same for a training step (plan_run: eager AdamW's temporary too)

  std::int64_t peak_forward() const;           ///< forward only
  std::int64_t peak_forward_backward() const;  ///< forward + backward (the ops' scratch included)
  std::int64_t peak_step() const;              ///< forward + backward + AdamW
  /// What a model allocated for `allocation` holds at most: peak_forward,
  /// peak_forward_backward or peak_step.
  std::int64_t peak(Allocation allocation) const;
};

/// Plans the buffers of a run without allocating anything, each block
/// keeping what `attention` says for the backward, each buffer in its dtype
/// for `precision` (bf16 takes element_bytes 4). Throws kInvalidInput when
/// the sizes are so large that the plan's byte counts would not fit
/// std::int64_t.
MemoryPlan plan_memory(const ModelConfig& m, const RunShape& r, unsigned threads, std::int64_t element_bytes = 4,
                       AttentionSaved attention = AttentionSaved::kProbabilities,
                       Precision precision = Precision::kF32);

/// A buffer of a full training step as `bench memory --buffers` lists it:
/// each buffer of the layouts, the parameter tensors grouped by name across
/// blocks, the weight copy, gradients and AdamW state over all parameters.
struct BufferRow {
  std::string phase;  ///< "parameters", "bf16 weight copy", "gradients", "optimizer state", "inputs",
                      ///< "activations, per block", "activations after the blocks", "workspace", "ops' scratch"
  std::string name, what;
  std::vector<std::int64_t> shape;
  std::string dtype;        ///< "f32", "bf16", "int32" (or "f64" in a plan of 8-byte values)
  std::int64_t each = 0;    ///< bytes of one, as laid out (aligned)
  std::int64_t count = 1;   ///< how many the step holds: one per block where each block keeps its own
  std::int64_t bytes() const { return each * count; }
};

/// Every buffer of `plan`'s full step (forward, backward and AdamW), in
/// plan order; their bytes add up to plan.peak_step().
std::vector<BufferRow> plan_buffers(const MemoryPlan& plan);

/// The threads the memory plan of a run on `backend` counts: the cpu
/// backend's `threads`, whose ops keep scratch per thread (the attention
/// backward's, the norms' weight gradients); 0 on a device backend, whose
/// ops keep their own.
inline unsigned plan_threads(const std::string& backend, unsigned threads) { return backend == "cpu" ? threads : 0; }

/// Refuses, before anything is allocated, a run whose planned `peak` (one of
/// the plan's peaks) exceeds the host memory available: kInvalidInput, one
/// line with `run` ("training", "evaluating", ...), the model and shape, the
/// bytes needed vs available, and memory_remedy's advice.
void require_host_memory(const MemoryPlan& plan, std::int64_t peak, const std::string& run);

/// What a run whose `peak` (one of the plan's peaks) exceeds `available`
/// bytes can do: "use --recompute swiglu (...)" or "use --recompute (...)",
/// the first level of RunShape::recompute past the run's that would bring
/// that peak within `available`, "or a smaller model, context or batch";
/// else "use a smaller model, context or batch".
std::string memory_remedy(const MemoryPlan& plan, std::int64_t peak, std::int64_t available);

/// The least activation recomputation (none, then swiglu, then blocks) at
/// which the plan `plan_at(level)` gives fits in `available` bytes, its
/// peak for `allocation` (a step's, or a forward and backward's without the
/// optimizer: kGradients); blocks when none fits, none when `available` is
/// 0 (unknown).
Recompute least_recompute(const std::function<MemoryPlan(Recompute)>& plan_at, std::int64_t available,
                          Allocation allocation = Allocation::kTrain);

/// Human-readable size: "1.23 GiB", "456.0 MiB", "12.0 KiB", "7 B".
std::string format_bytes(std::int64_t bytes);

}  // namespace ktune::model
