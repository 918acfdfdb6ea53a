// Global L2 norm of all gradients, and clip-by-norm (reference:
// templates/grad_norm/reference.hpp). Gradients are fp32, any number of
// tensors of any sizes; all math is fp32.
//   grad_norm_partials  one partial sum of squares per chunk of the
//                       concatenated tensors, into a workspace
//   grad_norm_finish    norm = sqrt(sum of the partials in chunk order) and
//                       the clip factor min(1, max_norm / (norm + 1e-6))
//                       (torch.nn.utils.clip_grad_norm_), both on the device
//   grad_norm_scale     grad *= the clip factor, in place (the clip as its
//                       own launch)
// The sum is two-level and its order depends only on the tensors and
// `chunk`, never on the grid or the schedule: results repeat bit for bit.
#pragma once
#include "common/kt.cuh"

namespace grad_norm {

/// The gradients of one launch, passed by value in the kernel parameters.
template <int MAX_TENSORS>
struct GradList {
  float* grad[MAX_TENSORS];         // (numel,)
  long long numel[MAX_TENSORS];
  int chunk_begin[MAX_TENSORS + 1];  // prefix sum of chunks per tensor
  int count;
};

/// Calls f(element pointer, VEC or 1 elements) over [begin, end) of `g`,
/// VEC at a time by thread when the range starts VEC-aligned.
template <int THREADS, int VEC, class F>
KT_DEVICE void for_range(float* g, long long begin, long long end, F f) {
  long long scalar_begin = begin;
  if (VEC > 1 && reinterpret_cast<unsigned long long>(g + begin) % (4 * VEC) == 0) {
    scalar_begin = begin + (end - begin) / VEC * VEC;
    for (long long i = begin + static_cast<long long>(threadIdx.x) * VEC; i < scalar_begin;
         i += static_cast<long long>(THREADS) * VEC)
      f(reinterpret_cast<kt::Vec<float, VEC>*>(g + i));
  }
  for (long long i = scalar_begin + threadIdx.x; i < end; i += THREADS) f(reinterpret_cast<kt::Vec<float, 1>*>(g + i));
}

/// Grid: any number of blocks; block b takes chunks b, b + gridDim.x, ... and
/// writes the sum of squares of chunk c to partials[first_chunk + c].
template <int THREADS,      // threads per block: more loads in flight per chunk vs more blocks
          int VEC,          // floats per access (1, 2, 4): wider loads, fewer instructions
          int MAX_TENSORS>  // tensors per launch: fewer launches vs a larger parameter block
__global__ void __launch_bounds__(THREADS)
    grad_norm_partials(GradList<MAX_TENSORS> list, long long chunk, float* partials, int first_chunk) {
  kt::wait_previous_kernel();
  static_assert(VEC == 1 || VEC == 2 || VEC == 4, "vector width is 1, 2 or 4 floats (up to 16-byte loads)");
  static_assert((THREADS & (THREADS - 1)) == 0 && THREADS >= 32 && THREADS <= 1024,
                "a block is a power-of-two number of whole warps: it reduces as one row");
  __shared__ float warp_partials[THREADS / 32];
  const int total = list.chunk_begin[list.count];
  int t = 0;
  for (int c = blockIdx.x; c < total; c += gridDim.x) {  // uniform over the block
    while (c >= list.chunk_begin[t + 1]) ++t;
    const long long begin = static_cast<long long>(c - list.chunk_begin[t]) * chunk;
    const long long end = begin + chunk < list.numel[t] ? begin + chunk : list.numel[t];
    float sum = 0.0f;
    for_range<THREADS, VEC>(list.grad[t], begin, end, [&](auto* v) {
#pragma unroll
      for (int k = 0; k < static_cast<int>(sizeof(v->v) / sizeof(float)); ++k) sum += v->v[k] * v->v[k];
    });
    sum = kt::row_reduce<THREADS, THREADS>(sum, warp_partials, kt::SumOp{});
    if (threadIdx.x == 0) partials[first_chunk + c] = sum;
  }
}

/// Grid: one block. out[0] = the norm, out[1] = the clip factor
/// (1 when max_norm <= 0: no clipping).
template <int THREADS>
__global__ void __launch_bounds__(THREADS)
    grad_norm_finish(const float* partials,  // (count,)
                     int count, float max_norm,
                     float* out) {           // (2,) norm, clip factor
  kt::wait_previous_kernel();
  static_assert((THREADS & (THREADS - 1)) == 0 && THREADS >= 32 && THREADS <= 1024,
                "a block is a power-of-two number of whole warps: it reduces as one row");
  __shared__ float warp_partials[THREADS / 32];
  float sum = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < count; i += THREADS) sum += partials[i];
  sum = kt::row_reduce<THREADS, THREADS>(sum, warp_partials, kt::SumOp{});
  if (threadIdx.x != 0) return;
  const float norm = sqrtf(sum);
  const float factor = max_norm / (norm + 1e-6f);
  out[0] = norm;
  out[1] = max_norm > 0.0f && !(factor >= 1.0f) ? factor : 1.0f;  // NaN for a NaN norm, as torch.clamp gives
}

/// grad *= *factor over every tensor of the list. Grid: any number of
/// blocks; block b takes chunks b, b + gridDim.x, ...
template <int THREADS, int VEC, int MAX_TENSORS>
__global__ void __launch_bounds__(THREADS)
    grad_norm_scale(GradList<MAX_TENSORS> list, long long chunk, const float* factor) {
  kt::wait_previous_kernel();
  const float s = *factor;
  if (s == 1.0f) return;  // uniform: no clipping needed
  const int total = list.chunk_begin[list.count];
  int t = 0;
  for (int c = blockIdx.x; c < total; c += gridDim.x) {
    while (c >= list.chunk_begin[t + 1]) ++t;
    const long long begin = static_cast<long long>(c - list.chunk_begin[t]) * chunk;
    const long long end = begin + chunk < list.numel[t] ? begin + chunk : list.numel[t];
    for_range<THREADS, VEC>(list.grad[t], begin, end, [&](auto* v) {
      auto x = *v;
#pragma unroll
      for (int k = 0; k < static_cast<int>(sizeof(x.v) / sizeof(float)); ++k) x.v[k] *= s;
      *v = x;
    });
  }
}

}  // namespace grad_norm
