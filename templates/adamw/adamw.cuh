// AdamW kernels (decoupled weight decay, bias correction), fp32 state:
//   adamw_multi_tensor   many tensors per launch, fixed-size chunks, persistent grid
//   adamw_single_tensor  one fused launch per tensor (what torch.compile of the
//                        per-tensor loop produces)
//   ew_*                 one primitive elementwise op per launch, composed on the
//                        host into PyTorch eager's _single_tensor_adam
// With BF16_COPY the fp32 master weights are also written as a bf16 copy.
// The fused kernels optionally clip by the global gradient norm as they read
// the gradient (torch.nn.utils.clip_grad_norm_ folded into the step): given
// the norm's address (grad_norm's out[0]) they scale g by
// min(1, max_norm / (norm + 1e-6)); with a null address the factor is 1.
// One loop serves both (a second, unclipped copy raises register pressure
// until variants spill): the multiply is free in a kernel bound by memory
// bandwidth, and a factor of 1 leaves every gradient bit for bit as it was.
#pragma once
#include "common/elementwise.cuh"

namespace adamw {

/// Step hyper-parameters; the bias corrections are computed on the host.
struct Hyper {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;
  float bias_correction1;       // 1 - beta1^step
  float bias_correction2_sqrt;  // sqrt(1 - beta2^step)
};

/// The tensors of one multi-tensor launch, passed by value in the kernel
/// parameters (as PyTorch's fused optimizers do), so no metadata upload.
template <int MAX_TENSORS>
struct TensorList {
  float* param[MAX_TENSORS];              // (numel,) fp32 master weights
  const float* grad[MAX_TENSORS];         // (numel,)
  float* exp_avg[MAX_TENSORS];            // (numel,)
  float* exp_avg_sq[MAX_TENSORS];         // (numel,)
  kt::bf16* param_bf16[MAX_TENSORS];      // (numel,) bf16 copy, or null
  long long numel[MAX_TENSORS];
  int chunk_begin[MAX_TENSORS + 1];       // prefix sum of chunks per tensor
  int count;
};

/// The clip factor of torch.nn.utils.clip_grad_norm_ for the global norm at
/// `norm` (as grad_norm computes it): min(1, max_norm / (norm + 1e-6)), 1 when
/// max_norm <= 0; NaN for a NaN norm (torch.clamp's min keeps the NaN).
KT_DEVICE float clip_factor(const float* norm, float max_norm) {
  const float factor = max_norm / (*norm + 1e-6f);
  return max_norm > 0.0f && !(factor >= 1.0f) ? factor : 1.0f;
}

/// The update of one element, shared by the fused kernels.
KT_DEVICE void update(float& p, float g, float& m, float& v, const Hyper& h) {
  p *= 1.0f - h.lr * h.weight_decay;
  m = h.beta1 * m + (1.0f - h.beta1) * g;
  v = h.beta2 * v + (1.0f - h.beta2) * g * g;
  const float denom = sqrtf(v) / h.bias_correction2_sqrt + h.eps;
  p -= (h.lr / h.bias_correction1) * (m / denom);
}

/// Updates elements [begin, end) of one tensor with THREADS threads, VEC
/// elements per thread per step when every pointer is VEC-aligned; each
/// gradient is first scaled by `clip`.
template <int THREADS, int VEC, bool BF16_COPY>
KT_DEVICE void update_range(float* p, const float* g, float* m, float* v, kt::bf16* p16, long long begin,
                            long long end, const Hyper& h, float clip) {
  long long scalar_begin = begin;
  if (VEC > 1) {
    const unsigned long long bits = reinterpret_cast<unsigned long long>(p + begin) |
                                    reinterpret_cast<unsigned long long>(g + begin) |
                                    reinterpret_cast<unsigned long long>(m + begin) |
                                    reinterpret_cast<unsigned long long>(v + begin);
    const bool aligned = bits % (4 * VEC) == 0 &&
                         (!BF16_COPY || reinterpret_cast<unsigned long long>(p16 + begin) % (2 * VEC) == 0);
    if (aligned) {
      scalar_begin = begin + (end - begin) / VEC * VEC;
      for (long long i = begin + static_cast<long long>(threadIdx.x) * VEC; i < scalar_begin;
           i += static_cast<long long>(THREADS) * VEC) {
        kt::Vec<float, VEC> pv = *reinterpret_cast<const kt::Vec<float, VEC>*>(p + i);
        kt::Vec<float, VEC> gv = *reinterpret_cast<const kt::Vec<float, VEC>*>(g + i);
#pragma unroll
        for (int k = 0; k < VEC; ++k) gv.v[k] *= clip;
        kt::Vec<float, VEC> mv = *reinterpret_cast<const kt::Vec<float, VEC>*>(m + i);
        kt::Vec<float, VEC> vv = *reinterpret_cast<const kt::Vec<float, VEC>*>(v + i);
#pragma unroll
        for (int k = 0; k < VEC; ++k) update(pv.v[k], gv.v[k], mv.v[k], vv.v[k], h);
        *reinterpret_cast<kt::Vec<float, VEC>*>(p + i) = pv;
        *reinterpret_cast<kt::Vec<float, VEC>*>(m + i) = mv;
        *reinterpret_cast<kt::Vec<float, VEC>*>(v + i) = vv;
        if (BF16_COPY) {
          kt::Vec<kt::bf16, VEC> bv;
#pragma unroll
          for (int k = 0; k < VEC; ++k) bv.v[k] = kt::from_float<kt::bf16>(pv.v[k]);
          *reinterpret_cast<kt::Vec<kt::bf16, VEC>*>(p16 + i) = bv;
        }
      }
    }
  }
  for (long long i = scalar_begin + threadIdx.x; i < end; i += THREADS) {
    float pi = p[i], mi = m[i], vi = v[i];
    update(pi, g[i] * clip, mi, vi, h);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
    if (BF16_COPY) p16[i] = kt::from_float<kt::bf16>(pi);
  }
}

/// Grid: any number of blocks; block b handles chunks b, b + gridDim.x, ...
/// of the concatenated tensors. clip_norm: null, or the global gradient
/// norm to clip by max_norm.
/// `chunk` (elements per work item; a multiple of VEC, so chunk starts keep
/// the tensor's alignment) is a run-time argument: small chunks balance short
/// tensors, large ones cut scheduling overhead, and the code is the same.
template <int THREADS,      // threads per block: more hides latency, fewer frees registers
          int VEC,          // elements per thread per step (1, 2, 4): wider loads, fewer instructions
          int MAX_TENSORS,  // tensors per launch: more means fewer launches, larger parameter block
          bool BF16_COPY>
__global__ void __launch_bounds__(THREADS)
    adamw_multi_tensor(TensorList<MAX_TENSORS> list, long long chunk, Hyper h, const float* clip_norm,
                       float max_norm) {
  kt::wait_previous_kernel();
  static_assert(VEC == 1 || VEC == 2 || VEC == 4, "vector width is 1, 2 or 4 floats (up to 16-byte loads)");
  const int total = list.chunk_begin[list.count];
  const float clip = clip_norm ? clip_factor(clip_norm, max_norm) : 1.0f;
  int t = 0;
  for (int c = blockIdx.x; c < total; c += gridDim.x) {
    while (c >= list.chunk_begin[t + 1]) ++t;  // chunks only grow, so the tensor index only grows
    const long long begin = static_cast<long long>(c - list.chunk_begin[t]) * chunk;
    const long long end = begin + chunk < list.numel[t] ? begin + chunk : list.numel[t];
    update_range<THREADS, VEC, BF16_COPY>(list.param[t], list.grad[t], list.exp_avg[t], list.exp_avg_sq[t],
                                          list.param_bf16[t], begin, end, h, clip);
  }
}

/// Grid: ceil(numel / (THREADS * VEC)) blocks, each one block-wide step.
/// clip_norm, max_norm: as adamw_multi_tensor's.
template <int THREADS, int VEC, bool BF16_COPY>
__global__ void __launch_bounds__(THREADS)
    adamw_single_tensor(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                        kt::bf16* param_bf16, long long numel, Hyper h, const float* clip_norm, float max_norm) {
  kt::wait_previous_kernel();
  static_assert(VEC == 1 || VEC == 2 || VEC == 4, "vector width is 1, 2 or 4 floats (up to 16-byte loads)");
  const long long begin = static_cast<long long>(blockIdx.x) * THREADS * VEC;
  const long long end = begin + THREADS * VEC < numel ? begin + THREADS * VEC : numel;
  update_range<THREADS, VEC, BF16_COPY>(param, grad, exp_avg, exp_avg_sq, param_bf16, begin, end, h,
                                        clip_norm ? clip_factor(clip_norm, max_norm) : 1.0f);
}

// Eager primitives: one op each, in PyTorch eager's elementwise shape
// (common/elementwise.cuh, kt::map): 4 fp32 elements per thread, grid
// ceil(n / (THREADS * 4)).

template <int THREADS>
__global__ void __launch_bounds__(THREADS) ew_scale(float* x, float a, long long n) {
  kt::wait_previous_kernel();
  kt::map<THREADS>(n, x, [a](float xv) { return xv * a; }, x);
}
template <int THREADS>
__global__ void __launch_bounds__(THREADS) ew_lerp(float* x, const float* y, float w, long long n) {
  kt::wait_previous_kernel();
  kt::map<THREADS>(n, x, [w](float xv, float yv) { return xv + w * (yv - xv); }, x, y);
}
template <int THREADS>
__global__ void __launch_bounds__(THREADS)
    ew_addcmul(float* x, const float* y, const float* z, float a, long long n) {
  kt::wait_previous_kernel();
  kt::map<THREADS>(n, x, [a](float xv, float yv, float zv) { return xv + a * yv * zv; }, x, y, z);
}
template <int THREADS>
__global__ void __launch_bounds__(THREADS) ew_sqrt(float* out, const float* x, long long n) {
  kt::wait_previous_kernel();
  kt::map<THREADS>(n, out, [](float xv) { return sqrtf(xv); }, x);
}
template <int THREADS>
__global__ void __launch_bounds__(THREADS) ew_div_scalar(float* x, float a, long long n) {
  kt::wait_previous_kernel();
  kt::map<THREADS>(n, x, [a](float xv) { return xv / a; }, x);
}
template <int THREADS>
__global__ void __launch_bounds__(THREADS) ew_add_scalar(float* x, float a, long long n) {
  kt::wait_previous_kernel();
  kt::map<THREADS>(n, x, [a](float xv) { return xv + a; }, x);
}
template <int THREADS>
__global__ void __launch_bounds__(THREADS)
    ew_addcdiv(float* x, const float* y, const float* z, float a, long long n) {
  kt::wait_previous_kernel();
  kt::map<THREADS>(n, x, [a](float xv, float yv, float zv) { return xv + a * (yv / zv); }, x, y, z);
}
template <int THREADS>
__global__ void __launch_bounds__(THREADS) ew_cast_bf16(kt::bf16* out, const float* x, long long n) {
  kt::wait_previous_kernel();
  kt::map<THREADS>(n, out, [](float xv) { return xv; }, x);
}

}  // namespace adamw
