// Host half of the device API (kt.cuh): the CUDA names a template may use,
// implemented on the CPU for the emulation backend (tuner/emu_*.cpp).
//
// How it is used: the emulation backend compiles
//     #define KT_EMULATION 1
//     <this header, its quoted includes expanded>
//     <the rendered source, exactly as NVRTC sees it>
//     <one trampoline per kernel name expression>
// with the host C++ compiler into a shared object. kt.cuh skips its GPU half
// when KT_EMULATION is defined, so nothing of this header is part of the GPU
// text: render.cpp only expands quoted includes, and kt.cuh never includes
// the kt_emu*.hpp files (the `.hpp` files are embedded for the backend only).
//
// Model: every CUDA thread is a fiber; the runner switches fibers at block
// barriers and warp collectives (see kt_emu_abi.hpp). `__shared__` variables
// are `static thread_local`: all fibers of a block run on one OS thread, one
// block at a time, so each OS thread's copy is the running block's shared
// memory. Dynamic shared memory comes from kt::dynamic_shared<T>().
#pragma once
#define KT_EMU_HPP 1

#include <math.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <limits>
#include <type_traits>
#include <utility>

#include "common/kt_emu_abi.hpp"
#include "common/kt_emu_types.hpp"

// ---- qualifiers ---------------------------------------------------------------

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __constant__ __attribute__((visibility("default")))  // found by name, as cuModuleGetGlobal finds it
#define __managed__
#define __shared__ thread_local  // static at block scope by that: `static __shared__` reads as in CUDA
#define __align__(n) __attribute__((aligned(n)))
#define KT_DEVICE inline

namespace kt::emu {
namespace detail {
inline thread_local Thread* current = nullptr;
}
/// The running emulated thread.
inline Thread* self() { return detail::current; }
}  // namespace kt::emu

// ---- built-in variables ---------------------------------------------------------

#define threadIdx (::kt::emu::self()->thread_idx)
#define blockIdx (::kt::emu::self()->block_idx)
#define blockDim (::kt::emu::self()->block_dim)
#define gridDim (::kt::emu::self()->grid_dim)
inline constexpr int warpSize = 32;

// ---- block barrier, fences ---------------------------------------------------------

inline void __syncthreads() {
  ::kt::emu::Thread* t = ::kt::emu::self();
  t->host->sync_threads(t);
}
inline int __syncthreads_count(int predicate) {
  ::kt::emu::Thread* t = ::kt::emu::self();
  return t->host->sync_threads_count(t, predicate != 0);
}
inline int __syncthreads_and(int predicate) {
  ::kt::emu::Thread* t = ::kt::emu::self();
  const int n = static_cast<int>(t->block_dim.x * t->block_dim.y * t->block_dim.z);
  return __syncthreads_count(predicate) == n;
}
inline int __syncthreads_or(int predicate) { return __syncthreads_count(predicate) != 0; }
namespace kt {
/// bar.sync ID, COUNT: waits until COUNT threads of the block (whole
/// warps) have arrived at named barrier ID (1..15), this one included.
template <unsigned ID, unsigned COUNT>
inline void named_barrier_sync() {
  ::kt::emu::Thread* t = ::kt::emu::self();
  t->host->named_barrier(t, ID, COUNT, 1);
}
/// bar.arrive ID, COUNT: counts this thread at named barrier ID without waiting.
template <unsigned ID, unsigned COUNT>
inline void named_barrier_arrive() {
  ::kt::emu::Thread* t = ::kt::emu::self();
  t->host->named_barrier(t, ID, COUNT, 0);
}
/// The emulation runs each launch to its end before the next: the previous
/// kernel has always finished.
inline void wait_previous_kernel() {}
}  // namespace kt
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
[[noreturn]] inline void __trap() {
  ::kt::emu::Thread* t = ::kt::emu::self();
  t->host->fail(t, "__trap() called");
  __builtin_unreachable();
}
inline void __nanosleep(unsigned) {}
// Device assert, which NVRTC declares without a header: a failed one ends the
// block with the expression and its line, as a GPU ends the kernel with
// "device-side assert triggered" (the host's <cassert> would end the process).
namespace kt::emu {
[[noreturn]] inline void assert_failed(const char* expression, const char* file, unsigned line) {
  char message[512];
  __builtin_snprintf(message, sizeof message, "assertion '%s' failed (%s:%u)", expression, file, line);
  ::kt::emu::Thread* t = ::kt::emu::self();
  t->host->fail(t, message);
  __builtin_unreachable();
}
}  // namespace kt::emu

// ---- misaligned accesses -----------------------------------------------------------
// The module is compiled with -fsanitize=alignment: a load or store through
// a pointer not aligned to its type (a float4 read from an address that is
// not a multiple of 16) calls the hook below, defined here in place of the
// sanitizer runtime's (g++ still links libubsan; its handler is never
// called), which ends the block with an error, as a GPU ends the kernel with
// "misaligned address". The structs mirror the compiler's (UBSan's)
// descriptors.
namespace kt::emu::ubsan {
struct SourceLocation {
  const char* file;
  unsigned line, column;
};
struct TypeDescriptor {
  unsigned short kind, info;
  char name[1];
};
struct TypeMismatch {
  SourceLocation location;
  const TypeDescriptor* type;
  unsigned char log_alignment, check_kind;
};
[[noreturn]] inline void misaligned(const TypeMismatch* data, unsigned long address) {
  static const char* const kKinds[] = {"load of", "store to", "reference to", "member access within"};
  char message[512];
  __builtin_snprintf(message, sizeof message,
                     "misaligned %s %s at address 0x%lx, which needs %lu-byte alignment (%s:%u:%u); "
                     "a GPU ends the kernel with 'misaligned address'",
                     data->check_kind < 4 ? kKinds[data->check_kind] : "access to", data->type->name, address,
                     1ul << data->log_alignment, data->location.file, data->location.line, data->location.column);
  ::kt::emu::Thread* t = ::kt::emu::self();
  t->host->fail(t, message);
  __builtin_unreachable();
}
}  // namespace kt::emu::ubsan
extern "C" __attribute__((visibility("hidden"))) void __ubsan_handle_type_mismatch_v1(
    ::kt::emu::ubsan::TypeMismatch* data, unsigned long address) {
  ::kt::emu::ubsan::misaligned(data, address);
}
extern "C" __attribute__((visibility("hidden"))) void __ubsan_handle_type_mismatch_v1_abort(
    ::kt::emu::ubsan::TypeMismatch* data, unsigned long address) {
  ::kt::emu::ubsan::misaligned(data, address);
}

// ---- array indices out of bounds ---------------------------------------------------
// And with -fsanitize=bounds (g++; clang++'s -fsanitize=array-bounds): an
// index outside an array of known size (a static __shared__ tile, a register
// array) calls the hook below and ends the block. A GPU reads or writes
// whatever lies past the array; here a static __shared__ array is part of the
// module's thread-local block, where an overrun would corrupt the process.
namespace kt::emu::ubsan {
struct OutOfBounds {
  SourceLocation location;
  const TypeDescriptor* array_type;
  const TypeDescriptor* index_type;
};
[[noreturn]] inline void out_of_bounds(const OutOfBounds* data, unsigned long value) {
  // An integer's descriptor: kind 0, info = log2(bit width) << 1 | signed.
  const TypeDescriptor* index = data->index_type;
  const unsigned bits = index->kind == 0 ? 1u << (index->info >> 1) : 128u;
  char number[32];
  if (bits > 64)
    __builtin_snprintf(number, sizeof number, "(wider than 64 bits)");
  else if (index->info & 1)
    __builtin_snprintf(number, sizeof number, "%lld",
                       bits == 64 ? static_cast<long long>(value)
                                  : static_cast<long long>(value << (64 - bits)) >> (64 - bits));
  else
    __builtin_snprintf(number, sizeof number, "%lu", value);
  char message[512];
  __builtin_snprintf(message, sizeof message, "index %s out of bounds of %s (%s:%u:%u)", number,
                     data->array_type->name, data->location.file, data->location.line, data->location.column);
  ::kt::emu::Thread* t = ::kt::emu::self();
  t->host->fail(t, message);
  __builtin_unreachable();
}
}  // namespace kt::emu::ubsan
extern "C" __attribute__((visibility("hidden"))) void __ubsan_handle_out_of_bounds(void* data, void* index) {
  ::kt::emu::ubsan::out_of_bounds(static_cast<const ::kt::emu::ubsan::OutOfBounds*>(data),
                                  reinterpret_cast<unsigned long>(index));
}
extern "C" __attribute__((visibility("hidden"))) void __ubsan_handle_out_of_bounds_abort(void* data, void* index) {
  ::kt::emu::ubsan::out_of_bounds(static_cast<const ::kt::emu::ubsan::OutOfBounds*>(data),
                                  reinterpret_cast<unsigned long>(index));
}
// ---- float-to-integer conversions out of range --------------------------------------
// And with -fsanitize=float-cast-overflow: a plain conversion of a floating-point value that the integer type
// cannot hold (`(int)3e9f`, `(unsigned char)-1.0f`, NaN) calls the hook below and ends the block. C++ leaves it
// undefined and x86 gives the type's lowest value (or wraps a byte), while a GPU's cvt.rzi saturates to the
// type's nearest end and gives 0 for NaN: an integer output would differ from the GPU's without a word.
namespace kt::emu::ubsan {
struct FloatCastOverflow {
  SourceLocation location;
  const TypeDescriptor* from;
  const TypeDescriptor* to;
};
[[noreturn]] inline void float_cast_overflow(const FloatCastOverflow* data, unsigned long from) {
  // A float's descriptor: kind 1, info = its bits; a float or a double comes by value, a wider one by address.
  double value = 0.0;
  if (data->from->info == 32) {
    float f;
    const auto bits = static_cast<std::uint32_t>(from);
    std::memcpy(&f, &bits, 4);
    value = f;
  } else if (data->from->info == 64) {
    std::memcpy(&value, &from, 8);
  } else {
    value = static_cast<double>(*reinterpret_cast<const long double*>(from));
  }
  char message[512];
  __builtin_snprintf(message, sizeof message,
                     "conversion of %g from %s to %s out of its range (%s:%u:%u): C++ leaves it undefined (x86 "
                     "gives the lowest value or wraps), a GPU saturates it to the nearest end and NaN to 0; clamp "
                     "first or use __float2int_rz and its kin, which saturate here too",
                     value, data->from->name, data->to->name, data->location.file, data->location.line,
                     data->location.column);
  ::kt::emu::Thread* t = ::kt::emu::self();
  t->host->fail(t, message);
  __builtin_unreachable();
}
}  // namespace kt::emu::ubsan
extern "C" __attribute__((visibility("hidden"))) void __ubsan_handle_float_cast_overflow(void* data, void* from) {
  ::kt::emu::ubsan::float_cast_overflow(static_cast<const ::kt::emu::ubsan::FloatCastOverflow*>(data),
                                        reinterpret_cast<unsigned long>(from));
}
extern "C" __attribute__((visibility("hidden"))) void __ubsan_handle_float_cast_overflow_abort(void* data,
                                                                                              void* from) {
  ::kt::emu::ubsan::float_cast_overflow(static_cast<const ::kt::emu::ubsan::FloatCastOverflow*>(data),
                                        reinterpret_cast<unsigned long>(from));
}
inline long long clock64() {
  static thread_local long long ticks = 0;
  return ticks += 1000;
}
// clock(): the same counter, in place of the C library's within the module (as __assert_fail below), so that a
// kernel's clock() reads the emulated counter and never the process's CPU time.
extern "C" __attribute__((visibility("hidden"))) clock_t clock() noexcept { return static_cast<clock_t>(clock64()); }

// ---- warp collectives -------------------------------------------------------------

namespace kt::emu {

/// Every lane of `mask` contributes `value` and receives all 32 contributions. As CUDA's *_sync collectives, it
/// waits only for the lanes of `mask` that have not exited (a lane past the block's last thread never exists:
/// as exited); returns the lanes that took part, whose contributions `all` holds (the rest read as 0xff bytes).
template <class T>
inline unsigned warp_gather(unsigned mask, const T& value, T (&all)[32]) {
  static_assert(sizeof(T) <= kMaxExchangeBytes, "warp exchange payloads are at most 64 bytes");
  Thread* t = self();
  return t->host->warp_exchange(t, mask, &value, sizeof(T), all);
}

/// As warp_gather over the whole warp, for what needs every lane's registers (`what`: mma.sync, ldmatrix): a
/// lane that has exited, or that the block lacks, ends the block.
template <class T>
inline void warp_gather_whole(const char* what, const T& value, T (&all)[32]) {
  const unsigned taking_part = warp_gather(0xffffffffu, value, all);
  if (taking_part == 0xffffffffu) return;
  char message[256];
  __builtin_snprintf(message, sizeof message,
                     "%s needs every lane of the warp; lanes 0x%08x have exited or do not exist", what,
                     ~taking_part);
  Thread* t = self();
  t->host->fail(t, message);
}

/// The value of lane `src_lane`; from a lane that has exited or does not exist (undefined in CUDA: a GPU gives
/// whatever its register held) the caller's own `var`, so that the result does not depend on the schedule.
template <class T>
inline T shuffle_from(unsigned mask, T var, unsigned src_lane) {
  static_assert(sizeof(T) <= 16, "__shfl_*_sync moves values of up to 16 bytes");
  T all[32];
  const unsigned taking_part = warp_gather(mask, var, all);
  return taking_part >> (src_lane & 31u) & 1u ? all[src_lane & 31u] : var;
}

/// vote.sync: the lanes of `mask` that take part (*taking_part, those that have not exited) whose `predicate`
/// is non-zero.
inline unsigned vote(unsigned mask, int predicate, unsigned* taking_part) {
  unsigned char all[32];
  *taking_part = warp_gather(mask, static_cast<unsigned char>(predicate != 0), all);
  unsigned bits = 0;
  for (unsigned l = 0; l < 32; ++l)
    if ((*taking_part >> l & 1u) && all[l] == 1) bits |= 1u << l;
  return bits;
}

}  // namespace kt::emu

template <class T>
inline T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize) {
  const unsigned lane = ::kt::emu::self()->lane;
  const unsigned base = lane & ~static_cast<unsigned>(width - 1);
  return ::kt::emu::shuffle_from(mask, var, base + (static_cast<unsigned>(src_lane) & (width - 1)));
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize) {
  const unsigned lane = ::kt::emu::self()->lane;
  unsigned src = lane ^ static_cast<unsigned>(lane_mask);
  if (src >= ((lane + width) & ~static_cast<unsigned>(width - 1))) src = lane;
  return ::kt::emu::shuffle_from(mask, var, src);
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  const unsigned lane = ::kt::emu::self()->lane;
  const unsigned src = (lane & (width - 1)) + delta < static_cast<unsigned>(width) ? lane + delta : lane;
  return ::kt::emu::shuffle_from(mask, var, src);
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  const unsigned lane = ::kt::emu::self()->lane;
  const unsigned src = (lane & (width - 1)) >= delta ? lane - delta : lane;
  return ::kt::emu::shuffle_from(mask, var, src);
}

// Lanes of the mask that have exited (or do not exist) take no part: a ballot has 0 for them, __all_sync asks the
// lanes that took part, __match_*_sync compares those lanes' values.
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  unsigned taking_part;
  return ::kt::emu::vote(mask, predicate, &taking_part);
}
inline int __any_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) != 0; }
inline int __all_sync(unsigned mask, int predicate) {
  unsigned taking_part;
  return ::kt::emu::vote(mask, predicate, &taking_part) == taking_part;
}
/// The lanes of `mask` whose `value` has this lane's bits.
template <class T>
inline unsigned __match_any_sync(unsigned mask, T value) {
  T all[32];
  const unsigned taking_part = ::kt::emu::warp_gather(mask, value, all);
  unsigned bits = 0;
  for (unsigned l = 0; l < 32; ++l)
    if ((taking_part >> l & 1u) && std::memcmp(&all[l], &value, sizeof(T)) == 0) bits |= 1u << l;
  return bits;
}
/// `mask` where every lane of it that has not exited holds the same bits (*pred 1), else 0 (*pred 0).
template <class T>
inline unsigned __match_all_sync(unsigned mask, T value, int* pred) {
  T all[32];
  const unsigned taking_part = ::kt::emu::warp_gather(mask, value, all);
  bool same = true;
  for (unsigned l = 0; l < 32; ++l)
    if ((taking_part >> l & 1u) && std::memcmp(&all[l], &value, sizeof(T)) != 0) same = false;
  *pred = same ? 1 : 0;
  return same ? mask : 0u;
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  unsigned char all[32];
  ::kt::emu::warp_gather(mask, static_cast<unsigned char>(0), all);
}

#define KT_EMU_WARP_REDUCE(name, T, op)                                  \
  inline T name(unsigned mask, T value) {                                \
    T all[32];                                                           \
    const unsigned taking_part = ::kt::emu::warp_gather(mask, value, all); \
    bool first = true;                                                   \
    T r{};                                                               \
    for (unsigned l = 0; l < 32; ++l) {                                  \
      if (!(taking_part >> l & 1u)) continue;                            \
      r = first ? all[l] : op;                                           \
      first = false;                                                     \
    }                                                                    \
    return r;                                                            \
  }
KT_EMU_WARP_REDUCE(__reduce_add_sync, unsigned, r + all[l])
KT_EMU_WARP_REDUCE(__reduce_add_sync, int, r + all[l])
KT_EMU_WARP_REDUCE(__reduce_min_sync, unsigned, all[l] < r ? all[l] : r)
KT_EMU_WARP_REDUCE(__reduce_min_sync, int, all[l] < r ? all[l] : r)
KT_EMU_WARP_REDUCE(__reduce_max_sync, unsigned, all[l] > r ? all[l] : r)
KT_EMU_WARP_REDUCE(__reduce_max_sync, int, all[l] > r ? all[l] : r)
KT_EMU_WARP_REDUCE(__reduce_and_sync, unsigned, r & all[l])
KT_EMU_WARP_REDUCE(__reduce_or_sync, unsigned, r | all[l])
KT_EMU_WARP_REDUCE(__reduce_xor_sync, unsigned, r ^ all[l])
#undef KT_EMU_WARP_REDUCE

// ---- atomics (relaxed, device scope, as CUDA's atomic* functions) ------------------

#define KT_EMU_ATOMIC_INT(T)                                                                              \
  inline T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }                    \
  inline T atomicSub(T* p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); }                    \
  inline T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }                  \
  inline T atomicAnd(T* p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_RELAXED); }                    \
  inline T atomicOr(T* p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); }                      \
  inline T atomicXor(T* p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED); }                    \
  inline T atomicCAS(T* p, T compare, T v) {                                                              \
    __atomic_compare_exchange_n(p, &compare, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);               \
    return compare;                                                                                       \
  }                                                                                                       \
  inline T atomicMax(T* p, T v) {                                                                         \
    T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                                         \
    while (old < v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) \
      ;                                                                                                   \
    return old;                                                                                           \
  }                                                                                                       \
  inline T atomicMin(T* p, T v) {                                                                         \
    T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                                         \
    while (v < old && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) \
      ;                                                                                                   \
    return old;                                                                                           \
  }
KT_EMU_ATOMIC_INT(int)
KT_EMU_ATOMIC_INT(unsigned)
KT_EMU_ATOMIC_INT(long long)
KT_EMU_ATOMIC_INT(unsigned long long)
#undef KT_EMU_ATOMIC_INT
/// ((old >= limit) ? 0 : old + 1), returning old.
inline unsigned atomicInc(unsigned* p, unsigned limit) {
  unsigned old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(p, &old, old >= limit ? 0u : old + 1u, true, __ATOMIC_RELAXED,
                                      __ATOMIC_RELAXED))
    ;
  return old;
}
/// ((old == 0 || old > limit) ? limit : old - 1), returning old.
inline unsigned atomicDec(unsigned* p, unsigned limit) {
  unsigned old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(p, &old, old == 0u || old > limit ? limit : old - 1u, true, __ATOMIC_RELAXED,
                                      __ATOMIC_RELAXED))
    ;
  return old;
}

namespace kt::emu {
/// Floating-point read-modify-write as a compare-and-swap loop on the bits.
template <class F, class U, class Op>
inline F atomic_float_rmw(F* p, Op op) {
  U* bits = reinterpret_cast<U*>(p);
  U old = __atomic_load_n(bits, __ATOMIC_RELAXED);
  for (;;) {
    F old_value, new_value;
    std::memcpy(&old_value, &old, sizeof(F));
    new_value = op(old_value);
    U desired;
    std::memcpy(&desired, &new_value, sizeof(F));
    if (__atomic_compare_exchange_n(bits, &old, desired, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return old_value;
  }
}
}  // namespace kt::emu

inline float atomicAdd(float* p, float v) {
  return ::kt::emu::atomic_float_rmw<float, std::uint32_t>(p, [v](float x) { return x + v; });
}
inline double atomicAdd(double* p, double v) {
  return ::kt::emu::atomic_float_rmw<double, std::uint64_t>(p, [v](double x) { return x + v; });
}
inline float atomicExch(float* p, float v) {
  return ::kt::emu::atomic_float_rmw<float, std::uint32_t>(p, [v](float) { return v; });
}
inline float atomicMax(float* p, float v) {
  return ::kt::emu::atomic_float_rmw<float, std::uint32_t>(p, [v](float x) { return fmaxf(x, v); });
}
inline float atomicMin(float* p, float v) {
  return ::kt::emu::atomic_float_rmw<float, std::uint32_t>(p, [v](float x) { return fminf(x, v); });
}
// The 16-bit float types and their pairs: a compare-and-swap loop on the 16 (or 32) bits, rounding each sum to
// the type, as the GPU's atomicAdd does (which keeps each half of a pair atomic; here the pair is).
inline __half atomicAdd(__half* p, __half v) {
  return ::kt::emu::atomic_float_rmw<__half, std::uint16_t>(p, [v](__half x) { return __hadd(x, v); });
}
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) {
  return ::kt::emu::atomic_float_rmw<__nv_bfloat16, std::uint16_t>(p, [v](__nv_bfloat16 x) { return __hadd(x, v); });
}
inline __half2 atomicAdd(__half2* p, __half2 v) {
  return ::kt::emu::atomic_float_rmw<__half2, std::uint32_t>(p, [v](__half2 x) { return __hadd2(x, v); });
}
inline __nv_bfloat162 atomicAdd(__nv_bfloat162* p, __nv_bfloat162 v) {
  return ::kt::emu::atomic_float_rmw<__nv_bfloat162, std::uint32_t>(p,
                                                                    [v](__nv_bfloat162 x) { return __hadd2(x, v); });
}
// The block- and system-scoped forms (atomicAdd_block, atomicCAS_system, ...): every thread here shares one
// memory, so each is its device-scoped form.
#define KT_EMU_ATOMIC_SCOPES(name)                    \
  template <class P, class... A>                      \
  inline auto name##_block(P* p, A... a) {            \
    return name(p, a...);                             \
  }                                                   \
  template <class P, class... A>                      \
  inline auto name##_system(P* p, A... a) {           \
    return name(p, a...);                             \
  }
KT_EMU_ATOMIC_SCOPES(atomicAdd)
KT_EMU_ATOMIC_SCOPES(atomicSub)
KT_EMU_ATOMIC_SCOPES(atomicExch)
KT_EMU_ATOMIC_SCOPES(atomicMin)
KT_EMU_ATOMIC_SCOPES(atomicMax)
KT_EMU_ATOMIC_SCOPES(atomicInc)
KT_EMU_ATOMIC_SCOPES(atomicDec)
KT_EMU_ATOMIC_SCOPES(atomicAnd)
KT_EMU_ATOMIC_SCOPES(atomicOr)
KT_EMU_ATOMIC_SCOPES(atomicXor)
KT_EMU_ATOMIC_SCOPES(atomicCAS)
#undef KT_EMU_ATOMIC_SCOPES

// ---- loads, math, bit intrinsics ------------------------------------------------------

// The cache-hinted loads and stores are the host's plain ones.
#define KT_EMU_LOAD(name)         \
  template <class T>              \
  inline T name(const T* p) {     \
    return *p;                    \
  }
#define KT_EMU_STORE(name)        \
  template <class T>              \
  inline void name(T* p, T v) {   \
    *p = v;                       \
  }
KT_EMU_LOAD(__ldg)
KT_EMU_LOAD(__ldcs)
KT_EMU_LOAD(__ldcg)
KT_EMU_LOAD(__ldca)
KT_EMU_LOAD(__ldlu)
KT_EMU_LOAD(__ldcv)
KT_EMU_STORE(__stcs)
KT_EMU_STORE(__stcg)
KT_EMU_STORE(__stwb)
KT_EMU_STORE(__stwt)
#undef KT_EMU_LOAD
#undef KT_EMU_STORE

template <class A, class B, class = std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>>>
inline std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(b) < static_cast<C>(a) ? static_cast<C>(b) : static_cast<C>(a);
}
template <class A, class B, class = std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>>>
inline std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(a) < static_cast<C>(b) ? static_cast<C>(b) : static_cast<C>(a);
}

inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return exp10f(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline void __sincosf(float x, float* s, float* c) {
  *s = sinf(x);
  *c = cosf(x);
}
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __saturatef(float x) { return x != x ? 0.0f : (x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x)); }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
inline float sinpif(float x) { return static_cast<float>(sin(3.14159265358979323846 * static_cast<double>(x))); }
inline float cospif(float x) { return static_cast<float>(cos(3.14159265358979323846 * static_cast<double>(x))); }
inline void sincospif(float x, float* s, float* c) {
  *s = sinpif(x);
  *c = cospif(x);
}

namespace kt::emu {
/// `rounded` (x rounded in the conversion's mode) as I, as PTX's cvt takes it: a NaN gives 0, a value past I's
/// range its nearest end.
template <class I, class F>
inline I convert_saturated(F x, F rounded) {
  if (x != x) return I{0};
  if (rounded <= static_cast<F>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  if (rounded >= static_cast<F>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return static_cast<I>(rounded);
}
}  // namespace kt::emu
// __float2int_rn and its kin: rn to nearest even, rz toward zero, rd down, ru up.
#define KT_EMU_CONVERT(name, F, I)                                                                         \
  inline I name##_rn(F x) { return ::kt::emu::convert_saturated<I, F>(x, nearbyint(x)); }                 \
  inline I name##_rz(F x) { return ::kt::emu::convert_saturated<I, F>(x, trunc(x)); }                     \
  inline I name##_rd(F x) { return ::kt::emu::convert_saturated<I, F>(x, floor(x)); }                     \
  inline I name##_ru(F x) { return ::kt::emu::convert_saturated<I, F>(x, ceil(x)); }
KT_EMU_CONVERT(__float2int, float, int)
KT_EMU_CONVERT(__float2uint, float, unsigned)
KT_EMU_CONVERT(__float2ll, float, long long)
KT_EMU_CONVERT(__float2ull, float, unsigned long long)
KT_EMU_CONVERT(__double2int, double, int)
KT_EMU_CONVERT(__double2uint, double, unsigned)
KT_EMU_CONVERT(__double2ll, double, long long)
KT_EMU_CONVERT(__double2ull, double, unsigned long long)
#undef KT_EMU_CONVERT
inline float __int2float_rn(int x) { return static_cast<float>(x); }
inline float __uint2float_rn(unsigned x) { return static_cast<float>(x); }
inline float __ll2float_rn(long long x) { return static_cast<float>(x); }
inline float __ull2float_rn(unsigned long long x) { return static_cast<float>(x); }
inline double __int2double_rn(int x) { return static_cast<double>(x); }
inline double __ll2double_rn(long long x) { return static_cast<double>(x); }
inline float __double2float_rn(double x) { return static_cast<float>(x); }

inline int __float_as_int(float x) { return static_cast<int>(::kt::emu::float_bits(x)); }
inline unsigned __float_as_uint(float x) { return ::kt::emu::float_bits(x); }
inline float __int_as_float(int x) { return ::kt::emu::bits_float(static_cast<unsigned>(x)); }
inline float __uint_as_float(unsigned x) { return ::kt::emu::bits_float(x); }
inline long long __double_as_longlong(double x) {
  long long r;
  std::memcpy(&r, &x, 8);
  return r;
}
inline double __longlong_as_double(long long x) {
  double r;
  std::memcpy(&r, &x, 8);
  return r;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  x = ((x >> 8) & 0x00ff00ffu) | ((x & 0x00ff00ffu) << 8);
  return (x >> 16) | (x << 16);
}
inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((static_cast<unsigned long long>(a) * b) >> 32);
}
inline int __mulhi(int a, int b) { return static_cast<int>((static_cast<long long>(a) * b) >> 32); }
inline long long __mul64hi(long long a, long long b) {
  return static_cast<long long>((static_cast<__int128>(a) * b) >> 64);
}
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return static_cast<unsigned long long>((static_cast<unsigned __int128>(a) * b) >> 64);
}
/// The high word of (hi:lo) << (shift & 31); _lc with the shift clamped to 32.
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned shift) {
  return static_cast<unsigned>(((static_cast<unsigned long long>(hi) << 32 | lo) << (shift & 31u)) >> 32);
}
inline unsigned __funnelshift_lc(unsigned lo, unsigned hi, unsigned shift) {
  return shift >= 32 ? lo : __funnelshift_l(lo, hi, shift);
}
/// The low word of (hi:lo) >> (shift & 31); _rc with the shift clamped to 32.
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned shift) {
  return static_cast<unsigned>((static_cast<unsigned long long>(hi) << 32 | lo) >> (shift & 31u));
}
inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned shift) {
  return shift >= 32 ? hi : __funnelshift_r(lo, hi, shift);
}
// Halving adds without overflow (r: rounding up), sums of absolute differences.
inline int __hadd(int x, int y) { return static_cast<int>((static_cast<long long>(x) + y) >> 1); }
inline int __rhadd(int x, int y) { return static_cast<int>((static_cast<long long>(x) + y + 1) >> 1); }
inline unsigned __uhadd(unsigned x, unsigned y) {
  return static_cast<unsigned>((static_cast<unsigned long long>(x) + y) >> 1);
}
inline unsigned __urhadd(unsigned x, unsigned y) {
  return static_cast<unsigned>((static_cast<unsigned long long>(x) + y + 1) >> 1);
}
inline unsigned __sad(int x, int y, unsigned z) {
  return static_cast<unsigned>(x > y ? static_cast<long long>(x) - y : static_cast<long long>(y) - x) + z;
}
inline unsigned __usad(unsigned x, unsigned y, unsigned z) { return (x > y ? x - y : y - x) + z; }
inline int __mul24(int a, int b) { return ((a << 8) >> 8) * ((b << 8) >> 8); }
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const unsigned long long v = (static_cast<unsigned long long>(y) << 32) | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<unsigned>((v >> (8 * ((s >> (4 * i)) & 7u))) & 0xffu) << (8 * i);
  return r;
}

// ---- dynamic shared memory, special functions, matrix ops ----------------------------

namespace kt {
/// The block's dynamic shared memory (Launch::dynamic_smem bytes), 16-byte aligned.
template <class T>
inline T* dynamic_shared() {
  return reinterpret_cast<T*>(emu::self()->dynamic_smem);
}
/// ex2.approx.ftz.f32 (kt.cuh): subnormal inputs read as 0, subnormal results flush to +0.
inline float exp2_approx(float x) {
  const float y = exp2f(std::fpclassify(x) == FP_SUBNORMAL ? 0.0f : x);
  return std::fpclassify(y) == FP_SUBNORMAL ? 0.0f : y;
}
}  // namespace kt

#include "common/kt_emu_mma.hpp"

#include "common/kt_emu_wgmma.hpp"

// glibc's assert (a source that includes <cassert> after this) calls this
// hook, defined in the module in place of glibc's, so it too ends the block.
extern "C" __attribute__((visibility("hidden"), noreturn)) void __assert_fail(const char* expression,
                                                                           const char* file, unsigned line,
                                                                           const char*) noexcept {
  ::kt::emu::assert_failed(expression, file, line);
}
// Last, so that no standard header included above brings <cassert>'s back;
// NDEBUG drops it, as CUDA's.
#undef assert
#ifdef NDEBUG
#define assert(e) static_cast<void>(0)
#else
#define assert(e) ((e) ? static_cast<void>(0) : __assert_fail(#e, __FILE__, __LINE__, __func__))
#endif
