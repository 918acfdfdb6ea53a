// Static pruning rules and the occupancy estimate (the CUDA occupancy
// calculator's arithmetic: registers per warp rounded to the allocation
// unit, shared memory per block rounded and plus the driver's reservation).
#include "search/pruning.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace ktune::search {

const char* to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::kOk: return "ok";
    case Verdict::kRankLast: return "rank last";
    case Verdict::kPruned: return "pruned";
  }
  return "?";
}

namespace {
std::int64_t round_up(std::int64_t v, std::int64_t unit) { return unit <= 1 ? v : (v + unit - 1) / unit * unit; }

PruneResult pruned(std::string reason) {
  PruneResult r;
  r.verdict = Verdict::kPruned;
  r.reason = std::move(reason);
  return r;
}
}  // namespace

PruneResult prune(const ResourceUsage& u, const DeviceLimits& l) {
  if (u.threads_per_block <= 0) return pruned("no threads per block");
  if (u.threads_per_block > l.max_threads_per_block)
    return pruned(fmt::format("{} threads per block exceed the limit of {}", u.threads_per_block,
                              l.max_threads_per_block));
  if (u.registers_per_thread > l.max_regs_per_thread)
    return pruned(fmt::format("{} registers per thread exceed the limit of {}", u.registers_per_thread,
                              l.max_regs_per_thread));
  if (u.static_shared_bytes > l.max_static_smem)
    return pruned(fmt::format("{} bytes of static shared memory exceed the static limit of {}",
                              u.static_shared_bytes, l.max_static_smem));
  const std::int64_t shared = u.static_shared_bytes + u.dynamic_shared_bytes;
  if (shared > l.max_smem_per_block)
    return pruned(fmt::format("{} bytes of shared memory per block exceed the limit of {}", shared,
                              l.max_smem_per_block));
  const std::int64_t regs_per_block =
      static_cast<std::int64_t>(u.registers_per_thread) * u.threads_per_block;
  if (regs_per_block > l.regs_per_sm)
    return pruned(fmt::format("{} registers x {} threads = {} exceed the register file of {}",
                              u.registers_per_thread, u.threads_per_block, regs_per_block, l.regs_per_sm));

  // Resident blocks per SM under each limit.
  const std::int64_t warps = (u.threads_per_block + l.warp_size - 1) / l.warp_size;
  const std::int64_t by_threads = (l.max_threads_per_sm / l.warp_size) / warps;
  std::int64_t by_regs = l.max_blocks_per_sm;
  if (u.registers_per_thread > 0) {
    const std::int64_t regs_per_warp = round_up(std::int64_t{u.registers_per_thread} * l.warp_size, l.reg_alloc_unit);
    by_regs = (l.regs_per_sm / regs_per_warp) / warps;
  }
  std::int64_t by_shared = l.max_blocks_per_sm;
  if (shared > 0) by_shared = l.smem_per_sm / (round_up(shared, l.smem_alloc_unit) + l.smem_reserved_per_block);
  const std::int64_t blocks = std::min({by_threads, by_regs, by_shared, std::int64_t{l.max_blocks_per_sm}});

  const std::string limit = blocks == by_threads ? "threads"
                          : blocks == by_regs    ? "registers"
                          : blocks == by_shared  ? "shared memory"
                                                 : "blocks";
  if (blocks <= 0) {
    PruneResult r = pruned(fmt::format("zero occupancy: no block fits on an SM (limited by {})", limit));
    r.limited_by = limit;
    return r;
  }
  PruneResult r;
  r.limited_by = limit;
  r.blocks_per_sm = static_cast<int>(blocks);
  r.occupancy = static_cast<double>(blocks * warps) / static_cast<double>(l.max_threads_per_sm / l.warp_size);
  if (u.spill_bytes > 0) {
    r.verdict = Verdict::kRankLast;
    r.reason = fmt::format("spills {} bytes to local memory", u.spill_bytes);
  }
  return r;
}

}  // namespace ktune::search
