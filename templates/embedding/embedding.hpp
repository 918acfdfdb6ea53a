// Host side of the token embedding families (templates/embedding/embedding.cuh):
//   embedding_fwd  out[t, :] = table[tokens[t], :]
//   embedding_bwd  d_table[v, :] = sum of d_out[t, :] over the tokens t of id v
//                  (overwritten, not accumulated); the tunable `deterministic`
//                  picks fp32 atomicAdd (0: no workspace, last bits vary), a
//                  stable sort of the tokens and a pass per vocabulary row
//                  (1: needs a workspace) or a warp per vocabulary row
//                  gathering its tokens in one launch (2; 3: its rows zeroed
//                  before the walk); 1, 2 and 3 sum in token order,
//                  bit-identical across runs and to each other
// Problems: dtype f32 (everything fp32) or bf16 (bf16 table and out for the
// forward, the bf16 copy of the weights; bf16 d_out with an fp32 d_table, the
// master weights' gradient, for the backward); dims `rows` (tokens), `dim`
// (d_model) and `vocab`.
// A token id outside [0, vocab) is never used as an address: the forward
// writes NaN over its row of out, the backward leaves it out of d_table.
//
// Run-time arguments: ForwardArgs, BackwardArgs below. Workload buffers, in
// the order the workload-driven `plan` takes their addresses:
//   embedding_fwd: tokens, table, out
//   embedding_bwd: tokens, d_out, d_table, scratch (scratch_ints(problem)
//                  int32: the workspace of every config)
// Row buffers must be aligned to the config's vector (16 bytes covers every
// config), tokens and the workspace to 4 bytes; `plan` checks it.
#pragma once
#include <cstdint>

#include "templates/embedding/reference.hpp"
#include "templates/family.hpp"

namespace ktune::templates::embedding {

/// The widest row (d_model) the kernels take.
inline constexpr std::int64_t kMaxDim = 1LL << 20;

/// int32 elements of the scratch buffer of embedding_bwd's workloads: at
/// least workspace_bytes / 4 for every config.
std::int64_t scratch_ints(const Problem& problem);

/// Device addresses of embedding_fwd's buffers.
struct ForwardArgs {
  std::uint64_t tokens = 0;  // (rows,) int32
  std::uint64_t table = 0;   // (vocab, dim) f32 or bf16
  std::uint64_t out = 0;     // (rows, dim) f32 or bf16; NaN rows for ids outside [0, vocab)
};
/// Device addresses of embedding_bwd's buffers; d_table is overwritten.
struct BackwardArgs {
  std::uint64_t tokens = 0;     // (rows,) int32
  std::uint64_t d_out = 0;      // (rows, dim) f32 or bf16
  std::uint64_t d_table = 0;    // (vocab, dim) f32
  std::uint64_t workspace = 0;  // int32 starts (vocab + 1), cursors (vocab), index (rows):
                                // workspace_bytes(config, problem), 0 bytes for the atomic variant
};

using ForwardFamily = TypedFamily<ForwardArgs>;
using BackwardFamily = TypedFamily<BackwardArgs>;

const ForwardFamily& forward_family();
const BackwardFamily& backward_family();

}  // namespace ktune::templates::embedding
