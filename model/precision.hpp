// The numeric precision of a run (DESIGN.md, "Precision modes"), and what it
// decides below the backends: the kernel families' problem dtype, the GEMMs'
// operand types and matrix units, and which attention the step runs.
//   f32   fp32 everywhere; GEMMs in full fp32
//   tf32  fp32 buffers; GEMMs (and flash attention) on the tf32 matrix units
//         (inputs rounded to 10 mantissa bits, fp32 accumulation)
//   bf16  mixed: bf16 activations and GEMM inputs, fp32 accumulation,
//         norms/softmax/loss math, master weights, gradients and AdamW state
#pragma once
#include <string>

namespace ktune::model {

enum class Precision { kF32, kTf32, kBf16 };

/// "f32", "tf32" or "bf16".
const char* to_string(Precision precision);
/// Parses the above; throws kInvalidInput naming the accepted ones.
Precision parse_precision(const std::string& text);
/// The kernel families' problem dtype: "f32" for f32 and tf32 (the families'
/// f32 attention multiplies on the tf32 matrix units), "bf16" for bf16.
const char* problem_dtype(Precision precision);

/// What a step keeps of each block's attention for the backward.
enum class AttentionSaved {
  kProbabilities,  ///< materialised attention: (B, H, S, S) probabilities
  kLogSumExp,      ///< flash attention: (B, H, S) fp32 row log-sum-exp (with O, which the step keeps anyway)
};
/// Flash attention where it runs: compiled mode in tf32 or bf16 (fp32 has no
/// exact flash kernel: the family's f32 problem multiplies in tf32); eager
/// mode and compiled f32 materialise the probabilities.
AttentionSaved attention_saved(Precision precision, bool compiled);

}  // namespace ktune::model
