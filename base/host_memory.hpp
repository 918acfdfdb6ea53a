// How much host memory a run may take, for refusing one that would not fit
// before anything is allocated (DESIGN.md, "Bad input gets a clear error").
#pragma once
#include <cstdint>
#include <string_view>

namespace ktune {

/// Bytes of host memory available to a new allocation now: MemAvailable of
/// /proc/meminfo, else free physical pages (sysconf); 0 when neither is known.
std::int64_t available_host_memory();

/// Throws kInvalidInput, one line naming `what` (e.g. "training model xl at
/// context 256"), the bytes needed and the bytes available, then `remedy`,
/// when `bytes` exceed available_host_memory(). Does nothing when that is
/// unknown.
void require_host_memory(std::int64_t bytes, std::string_view what,
                         std::string_view remedy = "use a smaller model, context or batch");

/// What a command says, in one line, when an allocation fails anyway (std::bad_alloc).
inline constexpr std::string_view kOutOfHostMemory =
    "out of host memory: what was asked for needs more than this machine gives; ask for less";

}  // namespace ktune
