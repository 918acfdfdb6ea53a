// Rotary position embedding (RoPE) kernels on interleaved pairs (math:
// templates/rope/reference.hpp), applied to q or k of the attention:
//   rope_forward   y  = x rotated by the angle of (position, pair)
//   rope_backward  dx = dy rotated by the opposite angle
// Activations are T (float or kt::bf16); the cos/sin tables are fp32, read as
// given (seq, HEAD_DIM / 2), and all math is fp32. y may be x (in place).
//
// Layout: a head's HEAD_DIM elements are split over LANES = HEAD_DIM / VEC
// threads, thread `lane` owning elements [lane * VEC, (lane + 1) * VEC), that
// is pairs [lane * VEC / 2, (lane + 1) * VEC / 2). A work item is one token
// and a group of HEADS consecutive heads of it; its LANES threads (a "slot")
// load their share of the token's cos/sin row once and rotate the same pairs
// in each head of the group. A block holds THREADS / LANES slots (the
// remaining THREADS % LANES threads idle); items are grid-strided, so any grid
// size is correct. A token's heads are contiguous; its row starts row_stride
// elements after the previous token's (heads * HEAD_DIM when the tensor is
// (tokens, heads, HEAD_DIM), more for q and k inside a fused (tokens, 3,
// heads, HEAD_DIM) projection).
#pragma once
#include "common/kt.cuh"

namespace rope {

/// The tunables and the shape's head dimension, with what they must satisfy.
template <int THREADS, int VEC, int HEADS, int HEAD_DIM, class T>
struct Layout {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "a block is whole warps, at most 1024 threads");
  static_assert(VEC == 2 || VEC == 4 || VEC == 8, "a thread rotates 1, 2 or 4 whole pairs per head");
  static_assert(sizeof(T) * VEC <= 16, "one access moves at most 16 bytes (VEC x element size)");
  static_assert(HEAD_DIM % VEC == 0, "a thread's vector never straddles two heads");
  static_assert(HEADS >= 1 && HEADS <= 16, "a thread rotates 1 to 16 heads per table load");
  static constexpr int kLanes = HEAD_DIM / VEC;   // threads per head
  static_assert(kLanes <= THREADS, "a block holds at least one head's threads");
  static constexpr int kSlots = THREADS / kLanes;  // work items per block per step
  static constexpr int kPairs = VEC / 2;           // pairs per thread and head
  static constexpr int kHalf = HEAD_DIM / 2;       // pairs per head: a table row
};

template <int BYTES, class P>
KT_DEVICE bool aligned(const P* p) {
  return reinterpret_cast<unsigned long long>(p) % BYTES == 0;
}

/// N consecutive table values at `p`: one access when `VECTORS`, else one per value.
template <bool VECTORS, int N>
KT_DEVICE kt::Vec<float, N> load_table(const float* __restrict__ p) {
  if constexpr (VECTORS) {
    return *reinterpret_cast<const kt::Vec<float, N>*>(p);
  } else {
    kt::Vec<float, N> r;
#pragma unroll
    for (int k = 0; k < N; ++k) r.v[k] = p[k];
    return r;
  }
}

/// VEC consecutive activations at `p`: one access when `VECTORS`, else one per element.
template <bool VECTORS, int VEC, class T>
KT_DEVICE kt::Vec<T, VEC> load_vec(const T* p) {
  if constexpr (VECTORS) {
    return *reinterpret_cast<const kt::Vec<T, VEC>*>(p);
  } else {
    kt::Vec<T, VEC> r;
#pragma unroll
    for (int k = 0; k < VEC; ++k) r.v[k] = p[k];
    return r;
  }
}

template <bool VECTORS, int VEC, class T>
KT_DEVICE void store_vec(T* p, const kt::Vec<T, VEC>& x) {
  if constexpr (VECTORS) {
    *reinterpret_cast<kt::Vec<T, VEC>*>(p) = x;
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) p[k] = x.v[k];
  }
}

/// The work of both kernels; BACKWARD rotates by the opposite angle. Each
/// element is read, then written, by one thread, all of a thread's loads of an
/// item before its stores, so `y` may be `x`: neither is __restrict__.
template <bool BACKWARD, bool VECTORS, int THREADS, int VEC, int HEADS, int HEAD_DIM, class T>
KT_DEVICE void rotate_items(const T* x,                           // (tokens, heads, HEAD_DIM), rows row_stride apart
                            const float* __restrict__ cos_table,  // (seq, HEAD_DIM / 2)
                            const float* __restrict__ sin_table,  // (seq, HEAD_DIM / 2)
                            T* y,                                 // as x, may be x
                            int tokens, int heads, int seq, long long row_stride) {
  using L = Layout<THREADS, VEC, HEADS, HEAD_DIM, T>;
  const int lane = static_cast<int>(threadIdx.x) % L::kLanes;
  const int slot = static_cast<int>(threadIdx.x) / L::kLanes;
  if (slot >= L::kSlots) return;  // the block's spare threads; the kernel has no barrier
  const int groups = (heads + HEADS - 1) / HEADS;
  const long long items = static_cast<long long>(tokens) * groups;  // < 2^31: the host checks tokens * heads
  const long long stride = static_cast<long long>(gridDim.x) * L::kSlots;
  for (long long it = static_cast<long long>(blockIdx.x) * L::kSlots + slot; it < items; it += stride) {
    const int item = static_cast<int>(it);  // 32-bit divisions below
    const int token = item / groups;
    const int head0 = (item - token * groups) * HEADS;
    const int table_offset = token % seq * L::kHalf + lane * L::kPairs;
    const kt::Vec<float, L::kPairs> c = load_table<VECTORS, L::kPairs>(cos_table + table_offset);
    const kt::Vec<float, L::kPairs> s = load_table<VECTORS, L::kPairs>(sin_table + table_offset);
    const long long base = token * row_stride + head0 * HEAD_DIM + lane * VEC;
    kt::Vec<T, VEC> v[HEADS];
#pragma unroll
    for (int h = 0; h < HEADS; ++h)
      if (head0 + h < heads) v[h] = load_vec<VECTORS, VEC>(x + base + h * HEAD_DIM);
#pragma unroll
    for (int h = 0; h < HEADS; ++h) {
      if (head0 + h < heads) {
        kt::Vec<T, VEC> out;
#pragma unroll
        for (int p = 0; p < L::kPairs; ++p) {
          // Operations in the reference's order: si = sign * sin, then the rotation.
          const float x0 = kt::to_float(v[h].v[2 * p]), x1 = kt::to_float(v[h].v[2 * p + 1]);
          const float si = BACKWARD ? -s.v[p] : s.v[p];
          out.v[2 * p] = kt::from_float<T>(x0 * c.v[p] - x1 * si);
          out.v[2 * p + 1] = kt::from_float<T>(x0 * si + x1 * c.v[p]);
        }
        store_vec<VECTORS, VEC>(y + base + h * HEAD_DIM, out);
      }
    }
  }
}

/// Whether every pointer, and every row, allows the vector accesses;
/// otherwise the kernels take the same items element by element.
template <int VEC, class T>
KT_DEVICE bool vectors_aligned(const T* x, const float* cos_table, const float* sin_table, const T* y,
                               long long row_stride) {
  constexpr int kTableBytes = 4 * (VEC / 2);
  return aligned<sizeof(T) * VEC>(x) && aligned<sizeof(T) * VEC>(y) && aligned<kTableBytes>(cos_table) &&
         aligned<kTableBytes>(sin_table) && row_stride % VEC == 0;
}

/// Both kernels' body: the vector path where everything allows it, else element by element.
template <bool BACKWARD, int THREADS, int VEC, int HEADS, int HEAD_DIM, class T>
KT_DEVICE void rotate(const T* x, const float* __restrict__ cos_table, const float* __restrict__ sin_table, T* y,
                      int tokens, int heads, int seq, long long row_stride) {
  if (vectors_aligned<VEC>(x, cos_table, sin_table, y, row_stride))
    rotate_items<BACKWARD, true, THREADS, VEC, HEADS, HEAD_DIM>(x, cos_table, sin_table, y, tokens, heads, seq,
                                                                row_stride);
  else
    rotate_items<BACKWARD, false, THREADS, VEC, HEADS, HEAD_DIM>(x, cos_table, sin_table, y, tokens, heads, seq,
                                                                 row_stride);
}

/// Grid: any size; ceil(tokens * ceil(heads / HEADS) / (THREADS / (HEAD_DIM / VEC)))
/// blocks give every item its own slot. Launch plan: templates/rope/family.cpp.
template <int THREADS,   // threads per block: more hides latency, fewer frees registers
          int VEC,       // elements per access (16 bytes at most): wider accesses, fewer threads per head
          int HEADS,     // heads per table load: more reuse cos/sin and keep loads in flight, fewer give more items
          int HEAD_DIM,  // the shape's head dimension: fixes the lanes of a head at compile time
          class T>       // float or kt::bf16
__global__ void __launch_bounds__(THREADS)
    rope_forward(const T* x,                           // (tokens, heads, HEAD_DIM), rows row_stride apart
                 const float* __restrict__ cos_table,  // (seq, HEAD_DIM / 2)
                 const float* __restrict__ sin_table,  // (seq, HEAD_DIM / 2)
                 T* y,                                 // as x, may be x
                 int tokens, int heads, int seq,
                 long long row_stride) {               // elements between tokens' rows, >= heads * HEAD_DIM
  kt::wait_previous_kernel();
  rotate<false, THREADS, VEC, HEADS, HEAD_DIM>(x, cos_table, sin_table, y, tokens, heads, seq, row_stride);
}

/// Gradient of rope_forward: dx from dy, same grid. dx may be dy.
template <int THREADS, int VEC, int HEADS, int HEAD_DIM, class T>
__global__ void __launch_bounds__(THREADS)
    rope_backward(const T* dy,                          // (tokens, heads, HEAD_DIM), rows row_stride apart
                  const float* __restrict__ cos_table,  // (seq, HEAD_DIM / 2)
                  const float* __restrict__ sin_table,  // (seq, HEAD_DIM / 2)
                  T* dx,                                // as dy, may be dy
                  int tokens, int heads, int seq,
                  long long row_stride) {               // elements between tokens' rows, >= heads * HEAD_DIM
  kt::wait_previous_kernel();
  rotate<true, THREADS, VEC, HEADS, HEAD_DIM>(dy, cos_table, sin_table, dx, tokens, heads, seq, row_stride);
}

}  // namespace rope
