// The shape of PyTorch eager's elementwise kernels (its vectorized
// elementwise loop), shared by the primitive kernels and AdamW's eager ops:
// thread t of block b owns the N consecutive elements from
// (b * THREADS + t) * N, N = 16 bytes of the widest operand (4 fp32, 8
// bf16); the grid is ceil(n / (THREADS * N)) blocks. A thread whose N
// elements all lie in [0, n), with every operand 16-byte aligned, moves them
// as one 16-byte access per operand; the others (the last block's, or every
// thread when an operand is not aligned) element by element.
#pragma once
#include "common/kt.cuh"

namespace kt {

/// Elements per thread over operands of types T...: 16 bytes of the widest.
template <class... T>
KT_DEVICE constexpr int elementwise_width() {
  int widest = 1;
  ((widest = static_cast<int>(sizeof(T)) > widest ? static_cast<int>(sizeof(T)) : widest), ...);
  return 16 / widest;
}

/// Whether p allows a 16-byte access.
KT_DEVICE bool aligned16(const void* p) { return reinterpret_cast<unsigned long long>(p) % 16 == 0; }

/// One thread's elements [first, first + N) of n; `whole`: all of them in
/// range and every operand aligned, so each moves as one vector.
struct ThreadElements {
  long long first;
  long long n;
  bool whole;
};

/// This thread's elements in a grid of THREADS-thread blocks, N each;
/// `aligned`: every operand is 16-byte aligned (aligned16).
template <int THREADS, int N>
KT_DEVICE ThreadElements thread_elements(long long n, bool aligned) {
  const long long first = (static_cast<long long>(blockIdx.x) * THREADS + threadIdx.x) * N;
  return {first, n, aligned && first + N <= n};
}

/// The thread's elements of p as fp32; 0 past n.
template <int N, class T>
KT_DEVICE void load_elements(const T* p, const ThreadElements& e, float (&out)[N]) {
  if (e.whole) {
    const Vec<T, N> v = *reinterpret_cast<const Vec<T, N>*>(p + e.first);
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = to_float(v.v[k]);
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = e.first + k < e.n ? to_float(p[e.first + k]) : 0.0f;
  }
}

/// Stores the thread's elements in range, converted to T.
template <int N, class T>
KT_DEVICE void store_elements(T* p, const ThreadElements& e, const float (&in)[N]) {
  if (e.whole) {
    Vec<T, N> v;
#pragma unroll
    for (int k = 0; k < N; ++k) v.v[k] = from_float<T>(in[k]);
    *reinterpret_cast<Vec<T, N>*>(p + e.first) = v;
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k)
      if (e.first + k < e.n) p[e.first + k] = from_float<T>(in[k]);
  }
}

/// One thread's elements of an operand, as fp32 (map's inputs).
template <int N>
struct Lanes {
  float v[N];
};
template <int N, class T>
KT_DEVICE Lanes<N> load_lanes(const T* p, const ThreadElements& e) {
  Lanes<N> l;
  load_elements(p, e, l.v);
  return l;
}
template <int N, class F, class... L>
KT_DEVICE void combine_lanes(F f, float (&out)[N], const L&... in) {
#pragma unroll
  for (int k = 0; k < N; ++k) out[k] = f(in.v[k]...);
}

/// out[i] = f(in[i]...) (fp32 values; none for a fill) over this thread's
/// elements of n, in a grid of THREADS-thread blocks of N =
/// elementwise_width<T, In...>() each. out may be one of the inputs (in
/// place).
template <int THREADS, class T, class F, class... In>
KT_DEVICE void map(long long n, T* out, F f, const In*... in) {
  constexpr int N = elementwise_width<T, In...>();
  const ThreadElements e = thread_elements<THREADS, N>(n, aligned16(out) && (aligned16(in) && ...));
  float values[N];
  combine_lanes(f, values, load_lanes<N>(in, e)...);
  store_elements(out, e, values);
}

}  // namespace kt
