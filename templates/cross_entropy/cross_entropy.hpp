// Host side of the softmax cross-entropy families (templates/cross_entropy/cross_entropy.cuh):
//   cross_entropy_fwd  loss = logsumexp(row) - row[target] per row, lse kept
//                      for the backward (one streaming pass over each row)
//   cross_entropy_bwd  dlogits = scale * (softmax(row) - onehot(target)),
//                      scale a run-time argument: 1 / rows for the mean
//                      loss (mean_scale; the workload's), 1 / (rows x
//                      micro-batches) in a step that accumulates them
// Problems: dtype f32 (everything fp32) or bf16 (bf16 logits and dlogits, as
// in bf16 mixed precision; targets int32; losses, lse and all math fp32);
// dims `rows` (tokens: batch x context) and `vocab`. The model's vocabulary is
// 10,000: a row is streamed by its threads, never held in registers.
//
// Run-time arguments: ForwardArgs, BackwardArgs below; workload buffers, in
// the order the workload-driven `plan` takes their addresses:
//   cross_entropy_fwd: logits, targets, losses, lse
//   cross_entropy_bwd: logits, targets, lse, dlogits; the kernel also accepts
//                      dlogits == logits, the model's in-place gradient.
// Any element-aligned buffers work with any config (rows start wherever the
// vocabulary puts them; misaligned heads and tails go one element at a time).
// A target outside [0, vocab) is never read through: its row's loss, or its
// row of dlogits, is NaN (the reference throws instead).
#pragma once
#include <cstdint>

#include "templates/cross_entropy/reference.hpp"
#include "templates/family.hpp"

namespace ktune::templates::cross_entropy {

/// Column indices are 32-bit, with room for a step's overshoot past the row.
inline constexpr std::int64_t kMaxVocab = std::int64_t{1} << 30;
inline constexpr std::int64_t kMaxRows = (std::int64_t{1} << 31) - 1;

/// The backward's scale for a problem: d mean / d row loss, 1 / rows, as fp32.
float mean_scale(const Problem& problem);

/// Device addresses of cross_entropy_fwd's buffers.
struct ForwardArgs {
  std::uint64_t logits = 0;   // (rows, vocab) f32 or bf16
  std::uint64_t targets = 0;  // (rows,) int32
  std::uint64_t losses = 0;   // (rows,) f32
  std::uint64_t lse = 0;      // (rows,) f32, for the backward
};
/// Device addresses of cross_entropy_bwd's buffers.
struct BackwardArgs {
  std::uint64_t logits = 0;   // (rows, vocab) f32 or bf16
  std::uint64_t targets = 0;  // (rows,) int32
  std::uint64_t lse = 0;      // (rows,) f32, as the forward left it
  std::uint64_t dlogits = 0;  // (rows, vocab) f32 or bf16; may be logits (in place)
  float scale = 0.0f;         // d total loss / d row loss: finite and positive (mean_scale for the mean)
};

using ForwardFamily = TypedFamily<ForwardArgs>;
using BackwardFamily = TypedFamily<BackwardArgs>;

const ForwardFamily& forward_family();
const BackwardFamily& backward_family();

}  // namespace ktune::templates::cross_entropy
