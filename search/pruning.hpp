// Static pruning before any launch: from the compiler's resource report and
// the device's limits, decide whether a config can run at all (pruned, with
// the reason), should be measured last (it spills registers to local
// memory), or is fine, and estimate its occupancy: the one fit check, used
// before compiling ahead, before a launch and by the compile checks.
#pragma once
#include <cstdint>
#include <string>

#include "base/device_limits.hpp"

namespace ktune::search {

/// What one kernel of a config uses (NVRTC's --ptxas-options=-v report plus
/// the launch geometry).
struct ResourceUsage {
  int registers_per_thread = 0;
  std::int64_t spill_bytes = 0;  ///< local-memory spill stores + loads
  std::int64_t static_shared_bytes = 0;
  std::int64_t dynamic_shared_bytes = 0;
  int threads_per_block = 0;
};

enum class Verdict {
  kOk,
  kRankLast,  ///< runs, but spills: measure after everything else
  kPruned,    ///< cannot launch on this device: never measured
};
const char* to_string(Verdict verdict);

struct PruneResult {
  Verdict verdict = Verdict::kOk;
  std::string reason;      ///< why it was pruned or ranked last; empty when kOk
  int blocks_per_sm = 0;   ///< resident blocks per SM (0 when pruned)
  double occupancy = 0;    ///< resident warps / maximum warps per SM, in [0, 1]
  std::string limited_by;  ///< "threads", "registers", "shared memory" or "blocks"
};

/// The verdict for one kernel. Pruned when threads exceed the block limit,
/// registers per thread exceed the maximum, static shared memory exceeds the
/// static limit, total shared memory exceeds the per-block limit, registers ×
/// threads exceed the register file, or no block fits on an SM (zero
/// occupancy). Ranked last when it spills. Otherwise ok.
PruneResult prune(const ResourceUsage& usage, const DeviceLimits& limits);

}  // namespace ktune::search
