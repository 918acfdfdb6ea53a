// Every environment knob ktune reads, in one place (STYLE.md habit 12).
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace ktune::env {

/// KTUNE_CACHE_DIR: root of the on-disk caches (compiled binaries, emulation
/// objects). Default: $XDG_CACHE_HOME/ktune (an absolute one: a relative one
/// is ignored, as the XDG spec says), else ~/.cache/ktune, else (no HOME
/// either) ktune-cache-UID in the temporary folder ($TMPDIR, else /tmp; one
/// not there throws kInvalidInput): made 0700, and refused (kInvalidInput)
/// where it is another user's or others may write to it, since emulation
/// objects are loaded from it as code. Without `make` (what reads or
/// removes what the cache holds), that fallback folder, where it is not
/// there, is not made: it holds nothing.
std::filesystem::path cache_dir(bool make = true);

/// KTUNE_CUDA_INCLUDE: CUDA headers handed to NVRTC. Default: the toolkit
/// include directory found at build time. Throws kInvalidInput where it names no folder.
std::string cuda_include_dir();

/// The most threads or worker processes one pool, option or knob may ask
/// for: every thread and worker count (KTUNE_COMPILE_THREADS, the CLI's
/// --threads and --workers, ThreadPool) is checked against 1..kMaxThreads.
inline constexpr unsigned kMaxThreads = 1024;

/// `n` when it lies in 1..kMaxThreads; otherwise throws kInvalidInput naming
/// `what` (e.g. "--threads") and the accepted range.
unsigned check_thread_count(std::int64_t n, std::string_view what);

/// Hardware threads of this machine (at least 1, at most kMaxThreads).
unsigned hardware_threads();

/// KTUNE_COMPILE_THREADS: parallel compilations. Default: hardware threads.
unsigned compile_threads();

/// KTUNE_HOST_CXX: host compiler for the emulation backend. Default: the C++
/// compiler ktune was built with.
std::string host_cxx();
/// Throws kInvalidInput where KTUNE_HOST_CXX is set to no executable (a path, or a name on PATH): the
/// emulation's start-up check, before any compile.
void require_host_cxx();

/// KTUNE_NO_DEVICE=1 hides every GPU, as if no driver were installed (any
/// value but 0, false, no or off, in any case: those say it is unset).
bool no_device();

/// The order in which the emulation resumes a block's ready threads (each
/// runs until its next barrier or warp collective), and when their cp.async
/// copies land. On a GPU the threads interleave in no fixed order and a copy
/// lands at any time between its issue and its wait, so a kernel whose
/// result depends on either (a missing __syncthreads or __syncwarp) fails its
/// check under kReverse or kShuffle while it may pass in order.
///   kInOrder  threads 0, 1, ...; copies land at their wait
///   kReverse  the last thread first; copies land when issued
///   kShuffle  a fresh permutation per block and sweep; each thread's copies
///             land when issued or at their wait, drawn per thread
/// Blocks start in the same kind of order: 0, 1, ...; the last first; or
/// shuffled.
struct EmuSchedule {
  enum class Order { kInOrder, kReverse, kShuffle };
  Order order = Order::kInOrder;
  std::uint64_t seed = 0;  ///< kShuffle's draws, per block, from this seed
};
/// KTUNE_EMU_SCHEDULE: shuffle[:SEED] (SEED a non-negative integer, default
/// 1; unset: shuffle:1), in-order or reverse; anything else throws
/// kInvalidInput.
EmuSchedule emu_schedule();

/// KTUNE_EMU_HANG_SECONDS: how long an emulated thread may run without
/// reaching a barrier, a warp collective or its end before its launch fails
/// as a hang, naming it (0: never). Default 60; an integer in 0..86400, else
/// throws kInvalidInput.
unsigned emu_hang_seconds();

/// How much a tuning session prints (KTUNE_PRINT, like Triton's
/// TRITON_PRINT_AUTOTUNING): kQuiet, the result table only; kSummary (the
/// default), progress and the top configs; kAll, every evaluation as well.
enum class PrintLevel { kQuiet, kSummary, kAll };
/// KTUNE_PRINT: quiet | summary | all; anything else throws kInvalidInput.
PrintLevel print_level();

/// The parts of cache_dir(), each in one folder: compiled binaries
/// (cubin/), emulation objects (emu/) and the session logs of `ktune tune`
/// when no --log is given (sessions/); `make` as cache_dir's.
std::filesystem::path binary_cache_dir(bool make = true);
std::filesystem::path emu_cache_dir(bool make = true);
std::filesystem::path session_log_dir(bool make = true);
/// Where the processes that use a GPU mark it (a folder per GPU UUID), so that each sees the others
/// (tuner/cuda/gpu_marks.hpp): KTUNE_GPU_MARK_DIR (an absolute path; a relative one is ignored), else one
/// folder for the whole machine, every user's and every cache folder's processes (ktune-gpus in /dev/shm, else in
/// the temporary folder). Not made here.
std::filesystem::path gpu_mark_dir();

/// Reads a variable; empty when unset.
std::string get(const char* name);

}  // namespace ktune::env
