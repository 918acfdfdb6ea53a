// Dtype cast kernel (reference: templates/cast/reference.hpp):
//   convert   y[i] = D(x[i]) for n elements, S -> D one of float -> kt::bf16
//             (round to nearest even, __float2bfloat16_rn) or kt::bf16 -> float
//             (exact).
// A pure copy, bandwidth-bound: a thread moves UNROLL vectors of VEC elements
// per step, every load issued before any store so that they are in flight
// together.
//
// Work split: when both pointers are VEC-aligned, elements [0, n / VEC * VEC)
// move as vectors: block tile t covers vectors [t * THREADS * UNROLL,
// (t + 1) * THREADS * UNROLL), thread k taking vectors k, k + THREADS, ... so
// each of its UNROLL accesses is coalesced across the block; tiles are
// grid-strided, so any grid size is correct. The rest (the last n % VEC
// elements, or every element when a pointer is misaligned) goes one element
// per thread of the grid.
#pragma once
#include "common/kt.cuh"

namespace cast {

template <int VEC, class T>
KT_DEVICE bool aligned(const T* p) {
  return reinterpret_cast<unsigned long long>(p) % (sizeof(T) * VEC) == 0;
}

/// One element, S -> D, through fp32 (exact for both directions' source).
template <class D, class S>
KT_DEVICE D convert_element(S x) {
  return kt::from_float<D>(kt::to_float(x));
}

/// Grid: any size; tunables and launch plan in templates/cast/family.cpp.
template <int THREADS,  // threads per block: more hides latency, fewer frees registers
          int VEC,      // elements per access: wider accesses, fewer instructions; 1 is the scalar path
          int UNROLL,   // vectors per thread per step: more loads in flight, more registers
          class S,      // source element: float or kt::bf16
          class D>      // destination element: kt::bf16 or float
__global__ void __launch_bounds__(THREADS)
    convert(const S* __restrict__ x,  // (n,)
            D* __restrict__ y,        // (n,)
            long long n) {
  kt::wait_previous_kernel();
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "a block is whole warps, at most 1024 threads");
  static_assert(VEC == 1 || VEC == 2 || VEC == 4 || VEC == 8, "vector width is 1, 2, 4 or 8 elements");
  static_assert(UNROLL >= 1 && UNROLL <= 8, "a thread moves 1 to 8 vectors per step");
  static_assert(sizeof(S) != sizeof(D), "a cast changes the element size (fp32 <-> bf16)");
  constexpr long long kTileVectors = static_cast<long long>(THREADS) * UNROLL;  // per block per step
  const bool vectors = aligned<VEC>(x) && aligned<VEC>(y);
  const long long n_vec = vectors ? n / VEC : 0;
  const long long tile_stride = static_cast<long long>(gridDim.x) * kTileVectors;
  for (long long tile = blockIdx.x * kTileVectors; tile < n_vec; tile += tile_stride) {
    kt::Vec<S, VEC> in[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const long long v = tile + u * THREADS + threadIdx.x;
      if (v < n_vec) in[u] = reinterpret_cast<const kt::Vec<S, VEC>*>(x)[v];
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const long long v = tile + u * THREADS + threadIdx.x;
      if (v < n_vec) {
        kt::Vec<D, VEC> out;
#pragma unroll
        for (int k = 0; k < VEC; ++k) out.v[k] = convert_element<D>(in[u].v[k]);
        reinterpret_cast<kt::Vec<D, VEC>*>(y)[v] = out;
      }
    }
  }
  const long long stride = static_cast<long long>(gridDim.x) * THREADS;
  for (long long i = n_vec * VEC + kt::global_thread_x(); i < n; i += stride) y[i] = convert_element<D>(x[i]);
}

}  // namespace cast
