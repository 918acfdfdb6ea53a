// Problems and configs the attention tests share: a problem of the
// attention families by its dims, and the configs of the kernels on wgmma
// (the families' `mma` 1, and the forward's 2).
#pragma once
#include <cstdint>

#include "templates/family.hpp"

namespace ktune::test::attention {

/// An attention problem of `batch` x `heads` heads of `seq` rows of `head_dim`.
inline templates::Problem problem(const char* dtype, std::int64_t seq, std::int64_t head_dim, bool causal,
                                  std::int64_t batch = 1, std::int64_t heads = 2) {
  return templates::Problem{
      dtype, {{"batch", batch}, {"heads", heads}, {"seq", seq}, {"head_dim", head_dim}, {"causal", causal}}};
}

/// attention_fwd on wgmma: 64 query rows a warpgroup; `mma` 1 each step in
/// turn, 2 overlapped; `pingpong` 1 the two warpgroups' products in turns.
inline Config wgmma_forward(std::int64_t block_m, std::int64_t block_n, std::int64_t stages = 2,
                            std::int64_t mma = 1, std::int64_t pingpong = 0) {
  return Config({{"block_m", block_m}, {"block_n", block_n}, {"warps", block_m / 16}, {"stages", stages},
                 {"kv_layout", 1}, {"q_regs", 0}, {"tile_order", 0}, {"mma", mma}, {"pingpong", pingpong}});
}

/// attention_bwd's dK/dV pass on wgmma: 64 keys a warpgroup, dQ by atomics
/// (dq_atomic 1 each thread's pairs, 2 bulk reductions of staged rows);
/// mma 1 in turn, 2 overlapped; tile_order 1 the longest blocks first;
/// pingpong 1 the two warpgroups' products in turns.
inline Config wgmma_backward(std::int64_t block_m, std::int64_t block_n, std::int64_t stages = 2,
                             std::int64_t mma = 1, std::int64_t dq_atomic = 1, std::int64_t tile_order = 0,
                             std::int64_t pingpong = 0) {
  return Config({{"block_m", block_m}, {"block_n", block_n}, {"warps", block_n / 16}, {"warp_split", 1},
                 {"stages", stages}, {"smem_layout", 1}, {"resident_regs", 0}, {"dq_atomic", dq_atomic},
                 {"mma", mma}, {"tile_order", tile_order}, {"pingpong", pingpong}});
}

}  // namespace ktune::test::attention
