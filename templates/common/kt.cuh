// kt.cuh: the device API every kernel template uses, and nothing else.
// On the GPU (nvcc, NVRTC) these are CUDA's own types and intrinsics plus the
// kt:: wrappers below (inline PTX for mma.sync, ldmatrix, cp.async); the
// emulation backend supplies the same names on the host, so one rendered
// source runs on both.
//
// Emulation: the backend defines KT_EMULATION and compiles the host half,
// templates/common/kt_emu.hpp (with kt_emu_types.hpp, kt_emu_mma.hpp,
// kt_emu_abi.hpp), ahead of the rendered text, as `-include` would. This file
// never includes those headers, so they are never part of the GPU text.
//
// Beyond plain C++ a template may use: threadIdx/blockIdx/blockDim/gridDim,
// warpSize, __syncthreads(_count/_and/_or), __syncwarp, __shfl(_xor/_down/_up)_sync,
// __ballot/__any/__all_sync, __reduce_{add,min,max}_sync, atomicAdd/Sub/Exch/
// Min/Max/And/Or/Xor/CAS, static __shared__ variables and
// kt::dynamic_shared<T>() (never `extern __shared__`), __ldg, the vector
// types (float2, float4, int4, ...), __nv_bfloat16/__half and their
// conversions, the fast-math intrinsics (__expf, rsqrtf, __fdividef, ...),
// the bit intrinsics (__popc, __clz, __ffs, __brev, __byte_perm, ...), and
// the kt:: functions of this file.
#pragma once

#if defined(KT_EMULATION)
#if !defined(KT_EMU_HPP)
#error "KT_EMULATION is defined but the host half (kt_emu.hpp) was not compiled first"
#endif
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#define KT_DEVICE __device__ __forceinline__

namespace kt {

/// The first statement of every kernel template. A backend may launch a
/// kernel whose source opts in (Rendered::waits_previous_kernel) before the
/// previous kernel of its stream has finished (programmatic dependent launch,
/// sm_90): its blocks become resident while that kernel's last blocks run.
/// This waits until the previous kernel has finished and its writes are
/// visible (griddepcontrol.wait), so nothing before it may touch global
/// memory; then it lets the next kernel launch early in turn (every block of
/// this one is running by then). Without such a launch, or below sm_90, it
/// returns at once.
KT_DEVICE void wait_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

/// The block's dynamic shared memory (Launch::dynamic_smem bytes), 16-byte aligned.
template <class T>
KT_DEVICE T* dynamic_shared() {
  extern __shared__ __align__(16) unsigned char kt_dynamic_smem[];
  return reinterpret_cast<T*>(kt_dynamic_smem);
}

// ---- warp-level matrix ops (sm_80+) -------------------------------------------
// Fragment layouts: PTX ISA, "Matrix Fragments for mma.m16n8k16 / mma.m16n8k8".

/// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: d = a * b + c.
KT_DEVICE void mma_m16n8k16_bf16(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
}
/// mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32.
KT_DEVICE void mma_m16n8k16_f16(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
}
/// mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32.
KT_DEVICE void mma_m16n8k8_bf16(float d[4], const unsigned a[2], const unsigned b[1], const float c[4]) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%8,%9,%10};\n"
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(b[0]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
/// mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32.
KT_DEVICE void mma_m16n8k8_f16(float d[4], const unsigned a[2], const unsigned b[1], const float c[4]) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%8,%9,%10};\n"
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(b[0]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
/// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32; registers hold tf32 values (see float_to_tf32).
KT_DEVICE void mma_m16n8k8_tf32(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
}
/// cvt.rna.tf32.f32: round to the nearest tf32, ties away from zero; the result is fp32 bits.
KT_DEVICE unsigned float_to_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

/// ex2.approx.ftz.f32: 2^x by the special function unit alone, as exact as
/// exp2f for normal results (exp2f without fast math wraps the same
/// instruction in a compare and two multiplies to keep results down to
/// 2^-149, which softmax probabilities never need). Subnormal inputs read as
/// 0 and subnormal results flush to +0; 2^-inf = +0.
KT_DEVICE float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

KT_DEVICE unsigned smem_address(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

/// ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16; `row` is this lane's row address.
KT_DEVICE void ldmatrix_x1(unsigned d[1], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(d[0]) : "r"(smem_address(row)));
}
KT_DEVICE void ldmatrix_x2(unsigned d[2], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(d[0]), "=r"(d[1])
               : "r"(smem_address(row)));
}
KT_DEVICE void ldmatrix_x4(unsigned d[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
               : "r"(smem_address(row)));
}
KT_DEVICE void ldmatrix_x1_trans(unsigned d[1], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(d[0]) : "r"(smem_address(row)));
}
KT_DEVICE void ldmatrix_x2_trans(unsigned d[2], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(d[0]), "=r"(d[1])
               : "r"(smem_address(row)));
}
KT_DEVICE void ldmatrix_x4_trans(unsigned d[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
               : "r"(smem_address(row)));
}

/// cp.async.{ca,cg}.shared.global: complete at the covering cp_async_wait.
KT_DEVICE void cp_async_4(void* smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_address(smem)), "l"(gmem));
}
KT_DEVICE void cp_async_8(void* smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_address(smem)), "l"(gmem));
}
KT_DEVICE void cp_async_16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_address(smem)), "l"(gmem));
}
/// 16-byte copy reading only `src_bytes` (0..16) and zero-filling the rest.
KT_DEVICE void cp_async_16_zfill(void* smem, const void* gmem, unsigned src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(smem)), "l"(gmem),
               "r"(src_bytes));
}
/// bar.sync ID, COUNT: waits until COUNT threads of the block (whole warps)
/// have arrived at named barrier ID (1..15; 0 is __syncthreads'), this warp
/// included: warpgroups taking turns, without the rest of the block. The
/// id is an immediate, so ptxas reserves only the barriers a kernel names.
template <unsigned ID, unsigned COUNT>
KT_DEVICE void named_barrier_sync() {
  static_assert(ID >= 1 && ID <= 15 && COUNT % 32 == 0, "ids 1..15, whole warps");
  asm volatile("bar.sync %0, %1;\n" ::"n"(ID), "n"(COUNT) : "memory");
}
/// bar.arrive ID, COUNT: counts this warp at named barrier ID without waiting.
template <unsigned ID, unsigned COUNT>
KT_DEVICE void named_barrier_arrive() {
  static_assert(ID >= 1 && ID <= 15 && COUNT % 32 == 0, "ids 1..15, whole warps");
  asm volatile("bar.arrive %0, %1;\n" ::"n"(ID), "n"(COUNT) : "memory");
}

/// cp.async.commit_group.
KT_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
/// cp.async.wait_group N: all but the N most recent committed groups are complete.
template <int N>
KT_DEVICE void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
/// cp.async.wait_all: every copy, committed or not, is complete.
KT_DEVICE void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::); }

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
// ---- bulk reductions (sm_90+) ---------------------------------------------------
/// cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32: gmem[i] +=
/// smem[i] for bytes / 4 floats, one instruction of one thread; both 16-byte
/// aligned, bytes a multiple of 16. Shared memory written by ordinary stores
/// is read after fence.proxy.async (wgmma.cuh's fence_proxy_async) and the
/// barrier that orders the writers before the issuing thread.
KT_DEVICE void bulk_reduce_add(float* gmem, const float* smem, unsigned bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(
                   __cvta_generic_to_global(gmem)),
               "r"(smem_address(smem)), "r"(bytes)
               : "memory");
}
/// cp.async.bulk.commit_group: this thread's bulk reductions since the last commit become one group.
KT_DEVICE void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
/// cp.async.bulk.wait_group.read N: all but this thread's N most recent
/// groups have read their shared memory, which may then be written again.
template <int N>
KT_DEVICE void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
#endif

}  // namespace kt
#endif  // KT_EMULATION

// ---- both backends: helpers written with the names above ----------------------------

namespace kt {

using bf16 = __nv_bfloat16;
using f16 = __half;

/// e^x as 2^(x log2 e) by exp2_approx: one multiply and the special function
/// unit, where expf spends about eight instructions on range reduction. For
/// the exponentials of softmax (x = logit - max <= 0, results in (0, 1]):
/// within about 2 ulp of expf where |x| is small, a relative 2^-24 |x| ln 2
/// more where it is large, and results below 2^-126 flush to +0.
KT_DEVICE float exp_approx(float x) { return exp2_approx(x * 1.4426950408889634f); }

/// N elements of T moved as one access: aligned to their size, capped at the
/// 16 bytes of the widest load, so a wider vector (8 fp32 values) is that
/// many 16-byte accesses. Templates load and store through it by
/// reinterpret_cast of a suitably aligned pointer.
template <class T, int N>
struct alignas(sizeof(T) * N < 16 ? sizeof(T) * N : 16) Vec {
  static_assert(N >= 1, "a vector holds at least one element");
  T v[N];
};

/// Element conversions used by templates, written once for every dtype.
KT_DEVICE float to_float(float x) { return x; }
KT_DEVICE float to_float(bf16 x) { return __bfloat162float(x); }
KT_DEVICE float to_float(f16 x) { return __half2float(x); }
template <class T>
KT_DEVICE T from_float(float x);
template <>
KT_DEVICE float from_float<float>(float x) { return x; }
template <>
KT_DEVICE bf16 from_float<bf16>(float x) { return __float2bfloat16_rn(x); }
template <>
KT_DEVICE f16 from_float<f16>(float x) { return __float2half_rn(x); }

/// Global thread index along x, 64-bit so large tensors never overflow.
KT_DEVICE long long global_thread_x() {
  return static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}

/// Lane within the warp and warp within the block, for 1-D blocks.
KT_DEVICE unsigned lane_id() { return threadIdx.x % 32u; }
KT_DEVICE unsigned warp_id() { return threadIdx.x / 32u; }

/// Two 16-bit values packed in one register, `lo` in the low half (an mma operand).
KT_DEVICE unsigned pack2(bf16 lo, bf16 hi) {
  return static_cast<unsigned>(__bfloat16_as_ushort(lo)) | static_cast<unsigned>(__bfloat16_as_ushort(hi)) << 16;
}
KT_DEVICE unsigned pack2(f16 lo, f16 hi) {
  return static_cast<unsigned>(__half_as_ushort(lo)) | static_cast<unsigned>(__half_as_ushort(hi)) << 16;
}

/// Sum / max / min over the 32 lanes of a full warp; every lane gets the result.
template <class T>
KT_DEVICE T warp_sum(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
template <class T>
KT_DEVICE T warp_max(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const T o = __shfl_xor_sync(0xffffffffu, v, offset);
    v = o > v ? o : v;
  }
  return v;
}
template <class T>
KT_DEVICE T warp_min(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const T o = __shfl_xor_sync(0xffffffffu, v, offset);
    v = o < v ? o : v;
  }
  return v;
}

/// p[0] += a and p[1] += b by fp32 atomics whose results are not read, p in
/// global memory and 8-byte aligned: one vector reduction
/// (red.global.add.v2.f32) from sm_90 on, two scalar ones before.
KT_DEVICE void atomic_add2(float* p, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(__cvta_generic_to_global(p)), "f"(a), "f"(b)
               : "memory");
#else
  atomicAdd(p, a);
  atomicAdd(p + 1, b);
#endif
}

// ---- row reductions ------------------------------------------------------------------
// A row of ROW_THREADS consecutive threads (a power of two) reduces one value
// per thread with a merge operation: sums (RMSNorm's mean square, softmax's
// denominators, dot products), maxima, and the online (max, sum of exp) pair
// of a logsumexp, all through the one row_reduce below.

/// -inf as a constant expression on both backends.
KT_DEVICE float negative_infinity() { return __uint_as_float(0xff800000u); }

/// A running logsumexp of part of a row: its largest value and the sum of
/// exp(value - max). The empty state is {-inf, 0}.
struct MaxSumExp {
  float max;
  float sum;
};

/// Merge operations for row_reduce: associative, and applied in a fixed order.
struct SumOp {
  KT_DEVICE float operator()(float a, float b) const { return a + b; }
};
/// The larger of two, NaN where either is (as torch.amax): a NaN in a row is
/// its max, where fmaxf would drop it. From sm_80 on one instruction
/// (max.NaN.f32), where the comparisons take three.
KT_DEVICE float max_nan(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float m;
  asm("max.NaN.f32 %0, %1, %2;\n" : "=f"(m) : "f"(a), "f"(b));
  return m;
#else
  return a > b || a != a ? a : b;
#endif
}
struct MaxOp {
  KT_DEVICE float operator()(float a, float b) const { return max_nan(a, b); }
};
/// Two logsumexps of disjoint parts of a row, as one. The rescales are
/// exp_approx's (two instructions each, where expf takes eight), as are the
/// terms summed: their arguments are <= 0, and a part's scaled sum flushes to
/// 0 only where its max is some 87 below the other's, whose sum is >= 1.
struct MaxSumExpOp {
  KT_DEVICE MaxSumExp operator()(MaxSumExp a, MaxSumExp b) const {
    const float m = max_nan(a.max, b.max);  // a part's NaN stays, where a part with nothing would drop it
    if (m == negative_infinity()) return {m, 0.0f};  // both empty (or all -inf): exp(-inf - -inf) would be NaN
    return {m, a.sum * exp_approx(a.max - m) + b.sum * exp_approx(b.max - m)};
  }
};

/// __shfl_xor_sync over the whole warp of each value a row_reduce merges.
KT_DEVICE float shfl_xor(float v, int offset) { return __shfl_xor_sync(0xffffffffu, v, offset); }
KT_DEVICE MaxSumExp shfl_xor(MaxSumExp v, int offset) {
  return {__shfl_xor_sync(0xffffffffu, v.max, offset), __shfl_xor_sync(0xffffffffu, v.sum, offset)};
}

/// `op` of `v` over the ROW_THREADS threads of each row of a block of
/// THREADS threads; every thread gets its row's result. Rows of up to a warp
/// merge with shuffles inside the warp (the xor offsets stay inside aligned
/// groups of ROW_THREADS lanes); wider rows merge their warps' results
/// through `warp_partials` (THREADS / 32 values of shared memory), in warp
/// order. The order is fixed, so results repeat bit for bit. Every thread of
/// the block must call it: wide rows synchronise the block (twice, so the
/// next call may reuse `warp_partials`).
template <int THREADS, int ROW_THREADS, class T, class Op>
KT_DEVICE T row_reduce(T v, T* warp_partials, Op op) {
  static_assert(ROW_THREADS >= 1 && (ROW_THREADS & (ROW_THREADS - 1)) == 0,
                "threads per row are a power of two, so shuffle groups align with warps");
  static_assert(THREADS % 32 == 0 && THREADS % ROW_THREADS == 0, "a block is whole warps holding whole rows");
  constexpr int GROUP = ROW_THREADS < 32 ? ROW_THREADS : 32;
#pragma unroll
  for (int offset = GROUP / 2; offset > 0; offset >>= 1) v = op(v, shfl_xor(v, offset));
  if constexpr (ROW_THREADS > 32) {
    constexpr int WARPS_PER_ROW = ROW_THREADS / 32;
    if (lane_id() == 0) warp_partials[warp_id()] = v;
    __syncthreads();
    const T* mine = warp_partials + threadIdx.x / ROW_THREADS * WARPS_PER_ROW;
    v = mine[0];
#pragma unroll
    for (int i = 1; i < WARPS_PER_ROW; ++i) v = op(v, mine[i]);
    __syncthreads();
  }
  return v;
}

}  // namespace kt
