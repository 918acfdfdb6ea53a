// SwiGLU gate kernels: the elementwise part of the feed-forward
// W2 (SiLU(W1 x) * W3 x) between its GEMMs (math: templates/swiglu/reference.hpp).
//   swiglu_forward   h = silu(a) * b
//   swiglu_backward  da = dh * b * silu'(a), db = dh * silu(a)
// T is float or kt::bf16; the math is fp32 either way (bf16 in and out, fp32
// in registers). Both kernels are bandwidth-bound: a thread moves UNROLL
// vectors of VEC elements per operand per step, all loads issued before any
// math so that they are in flight together.
#pragma once
#include "common/kt.cuh"

namespace swiglu {

/// expf, not __expf: the fp32 result then stays within rounding of the reference.
KT_DEVICE float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/// h of one element; operations in the reference's order.
KT_DEVICE float forward_element(float a, float b) {
  const float sig = sigmoid(a);
  return a * sig * b;
}

/// da and db of one element; operations in the reference's order.
KT_DEVICE void backward_element(float a, float b, float dh, float& da, float& db) {
  const float sig = sigmoid(a);
  db = dh * (a * sig);
  da = dh * b * sig * (1.0f + a * (1.0f - sig));
}

template <int VEC, class T>
KT_DEVICE bool aligned(const T* p) {
  return reinterpret_cast<unsigned long long>(p) % (sizeof(T) * VEC) == 0;
}

template <int VEC, class T>
KT_DEVICE kt::Vec<T, VEC> load(const T* p, long long v) {
  return reinterpret_cast<const kt::Vec<T, VEC>*>(p)[v];
}

template <int VEC, class T>
KT_DEVICE void store(T* p, long long v, const kt::Vec<T, VEC>& x) {
  reinterpret_cast<kt::Vec<T, VEC>*>(p)[v] = x;
}

// Work split of both kernels. When every pointer is VEC-aligned, elements
// [0, n / VEC * VEC) move as vectors: block tile t covers vectors
// [t * THREADS * UNROLL, (t + 1) * THREADS * UNROLL), thread k taking vectors
// k, k + THREADS, ... so each of its UNROLL accesses is coalesced across the
// block; tiles are grid-strided, so any grid size is correct. The rest (the
// last n % VEC elements, or every element when a pointer is misaligned) goes
// one element per thread of the grid.

/// The tunables of both kernels, with what they must satisfy.
template <int THREADS, int VEC, int UNROLL, class T>
struct Tunables {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "a block is whole warps, at most 1024 threads");
  static_assert(VEC == 1 || VEC == 2 || VEC == 4 || VEC == 8, "vector width is 1, 2, 4 or 8 elements");
  static_assert(sizeof(T) * VEC <= 16, "one access moves at most 16 bytes (VEC x element size)");
  static_assert(UNROLL >= 1 && UNROLL <= 8, "a thread moves 1 to 8 vectors per operand per step");
  static constexpr long long kTileVectors = static_cast<long long>(THREADS) * UNROLL;  // per block per step
};

/// Grid: any size; tunables/launch plan in templates/swiglu/family.cpp.
template <int THREADS,  // threads per block: more hides latency, fewer frees registers
          int VEC,      // elements per access (16 bytes at most): wider accesses, fewer instructions
          int UNROLL,   // vectors per thread per step: more loads in flight, more registers
          class T>      // float or kt::bf16
__global__ void __launch_bounds__(THREADS)
    swiglu_forward(const T* __restrict__ a,  // (n,)
                   const T* __restrict__ b,  // (n,)
                   T* __restrict__ h,        // (n,)
                   long long n) {
  kt::wait_previous_kernel();
  using K = Tunables<THREADS, VEC, UNROLL, T>;
  const bool vectors = aligned<VEC>(a) && aligned<VEC>(b) && aligned<VEC>(h);
  const long long n_vec = vectors ? n / VEC : 0;
  const long long tile_stride = static_cast<long long>(gridDim.x) * K::kTileVectors;
  for (long long tile = blockIdx.x * K::kTileVectors; tile < n_vec; tile += tile_stride) {
    kt::Vec<T, VEC> va[UNROLL], vb[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const long long v = tile + u * THREADS + threadIdx.x;
      if (v < n_vec) {
        va[u] = load<VEC>(a, v);
        vb[u] = load<VEC>(b, v);
      }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const long long v = tile + u * THREADS + threadIdx.x;
      if (v < n_vec) {
        kt::Vec<T, VEC> vh;
#pragma unroll
        for (int k = 0; k < VEC; ++k)
          vh.v[k] = kt::from_float<T>(forward_element(kt::to_float(va[u].v[k]), kt::to_float(vb[u].v[k])));
        store<VEC>(h, v, vh);
      }
    }
  }
  const long long stride = static_cast<long long>(gridDim.x) * THREADS;
  for (long long i = n_vec * VEC + kt::global_thread_x(); i < n; i += stride)
    h[i] = kt::from_float<T>(forward_element(kt::to_float(a[i]), kt::to_float(b[i])));
}

/// Grid: any size. `da` may be `dh` (the gradient computed in place): each
/// element is read and written by one thread, loads before stores, so the two
/// carry no __restrict__.
template <int THREADS,  // threads per block: more hides latency, fewer frees registers
          int VEC,      // elements per access (16 bytes at most): wider accesses, fewer instructions
          int UNROLL,   // vectors per thread per step: more loads in flight, more registers
          class T>      // float or kt::bf16
__global__ void __launch_bounds__(THREADS)
    swiglu_backward(const T* __restrict__ a,  // (n,)
                    const T* __restrict__ b,  // (n,)
                    const T* dh,              // (n,)
                    T* da,                    // (n,), may be dh
                    T* __restrict__ db,       // (n,)
                    long long n) {
  kt::wait_previous_kernel();
  using K = Tunables<THREADS, VEC, UNROLL, T>;
  const bool vectors =
      aligned<VEC>(a) && aligned<VEC>(b) && aligned<VEC>(dh) && aligned<VEC>(da) && aligned<VEC>(db);
  const long long n_vec = vectors ? n / VEC : 0;
  const long long tile_stride = static_cast<long long>(gridDim.x) * K::kTileVectors;
  for (long long tile = blockIdx.x * K::kTileVectors; tile < n_vec; tile += tile_stride) {
    kt::Vec<T, VEC> va[UNROLL], vb[UNROLL], vg[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const long long v = tile + u * THREADS + threadIdx.x;
      if (v < n_vec) {
        va[u] = load<VEC>(a, v);
        vb[u] = load<VEC>(b, v);
        vg[u] = load<VEC>(dh, v);
      }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const long long v = tile + u * THREADS + threadIdx.x;
      if (v < n_vec) {
        kt::Vec<T, VEC> vda, vdb;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          float ga, gb;
          backward_element(kt::to_float(va[u].v[k]), kt::to_float(vb[u].v[k]), kt::to_float(vg[u].v[k]), ga, gb);
          vda.v[k] = kt::from_float<T>(ga);
          vdb.v[k] = kt::from_float<T>(gb);
        }
        store<VEC>(da, v, vda);
        store<VEC>(db, v, vdb);
      }
    }
  }
  const long long stride = static_cast<long long>(gridDim.x) * THREADS;
  for (long long i = n_vec * VEC + kt::global_thread_x(); i < n; i += stride) {
    float ga, gb;
    backward_element(kt::to_float(a[i]), kt::to_float(b[i]), kt::to_float(dh[i]), ga, gb);
    da[i] = kt::from_float<T>(ga);
    db[i] = kt::from_float<T>(gb);
  }
}

}  // namespace swiglu
