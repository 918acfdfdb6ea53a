// kt.cuh: the device API every kernel template uses, and nothing else.
// On the GPU (nvcc, NVRTC) these are CUDA's own types and intrinsics; the
// emulation backend supplies the same names on the host (KT_EMULATION), so
// one rendered source runs on both.
#pragma once

#if !defined(KT_EMULATION)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#define KT_DEVICE __device__ __forceinline__

namespace kt {

using bf16 = __nv_bfloat16;
using f16 = __half;

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

}  // namespace kt
#endif  // !KT_EMULATION
