// The host half of kt.cuh, feature by feature: indices, barriers, static and
// dynamic shared memory, shuffles, votes, reductions, atomics, conversions,
// vector types and fast-math intrinsics, each checked by a probe kernel.
#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>

#include "tuner/emu_probe.hpp"

namespace tuner_emu_device_api_emu_test {

namespace {

const char* kProbe = R"(
__global__ void k_index(int* out) {
  const int block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  const int t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  out[block * blockDim.x * blockDim.y * blockDim.z + t] =
      blockIdx.x + 10 * blockIdx.y + 100 * threadIdx.x + 1000 * threadIdx.y + 10000 * threadIdx.z;
}

__global__ void k_reverse(float* out, const float* in, int* counts) {
  __shared__ float tile[256];
  const int t = threadIdx.x;
  tile[t] = in[blockIdx.x * 256 + t];
  __syncthreads();
  out[blockIdx.x * 256 + t] = tile[255 - t];
  const int n = __syncthreads_count(t % 4 == 0);
  if (t == 0) counts[blockIdx.x] = n;
}

__global__ void k_warp(int* out) {
  const int lane = threadIdx.x % 32;
  int* o = out + threadIdx.x * 10;
  o[0] = __shfl_sync(0xffffffffu, lane * 3, (lane + 5) % 32);
  o[1] = __shfl_xor_sync(0xffffffffu, lane, 7);
  o[2] = __shfl_down_sync(0xffffffffu, lane, 3);
  o[3] = __shfl_up_sync(0xffffffffu, lane, 2);
  o[4] = static_cast<int>(__ballot_sync(0xffffffffu, lane % 3 == 0));
  o[5] = __any_sync(0xffffffffu, lane == 17) + 2 * __all_sync(0xffffffffu, lane < 40) +
         4 * __all_sync(0xffffffffu, lane < 31);
  o[6] = kt::warp_sum(lane) + kt::warp_max(lane) * 1000;
  o[7] = __shfl_sync(0xffffffffu, lane, 0, 8);
  o[8] = lane < 16 ? __shfl_sync(0x0000ffffu, lane, 15) : __shfl_sync(0xffff0000u, lane, 16);
  __syncwarp();
  o[9] = static_cast<int>(__reduce_add_sync(0xffffffffu, static_cast<unsigned>(lane)));
}

__global__ void k_atomics(float* fsum, int* isum, int* imax) {
  atomicAdd(fsum, 1.0f);
  atomicAdd(isum, static_cast<int>(threadIdx.x));
  atomicMax(imax, static_cast<int>((threadIdx.x * 7 + blockIdx.x * 13) % 1000));
}

// The block- and system-scoped atomics are the device-scoped ones here; clock() counts as clock64().
__global__ void k_scoped(int* isum, float* fsum, int* imax, int* ticking) {
  atomicAdd_block(isum, 1);
  atomicAdd_system(fsum, 2.0f);
  atomicMax_block(imax, static_cast<int>(threadIdx.x));
  atomicCAS_system(imax + 1, 0, 7);
  const long long before = clock();
  const long long after = clock();
  if (threadIdx.x == 0) ticking[blockIdx.x] = after > before;
}

__global__ void k_dynamic(float* out, int n) {
  float* s = kt::dynamic_shared<float>();
  s[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = s[(threadIdx.x + 1) % n];
}

__global__ void k_convert(unsigned short* bf, unsigned short* hf, float* back, const float* in) {
  const int i = threadIdx.x;
  bf[i] = __bfloat16_as_ushort(kt::from_float<kt::bf16>(in[i]));
  hf[i] = __half_as_ushort(kt::from_float<kt::f16>(in[i]));
  back[i] = kt::to_float(__ushort_as_half(hf[i]));
}

__global__ void k_vector(float4* out, const float4* in) {
  static_assert(alignof(float4) == 16 && alignof(float2) == 8 && alignof(int4) == 16, "CUDA alignments");
  const float4 v = __ldg(in + threadIdx.x);
  out[threadIdx.x] = make_float4(v.w, v.z, __expf(0.f) + rsqrtf(4.f), __fdividef(1.f, 4.f) + __popc(0xffu));
}
)";

enum { kIndex, kReverse, kWarp, kAtomics, kDynamic, kConvert, kVector, kScoped };

ktune::test::EmuProbe& probe() {
  static ktune::test::EmuProbe p(kProbe, {"k_index", "k_reverse", "k_warp", "k_atomics", "k_dynamic", "k_convert",
                                          "k_vector", "k_scoped"});
  return p;
}

}  // namespace

TEST_CASE("emulated thread and block indices over 3-D grids and blocks", "[emu]") {
  auto& p = probe();
  int* out = p.buffer("out", std::vector<int>(4 * 16, -1));
  p.launch(kIndex, {2, 2, 1}, {4, 2, 2}, ktune::templates::ArgPack().add(out));
  for (unsigned by = 0; by < 2; ++by)
    for (unsigned bx = 0; bx < 2; ++bx)
      for (unsigned tz = 0; tz < 2; ++tz)
        for (unsigned ty = 0; ty < 2; ++ty)
          for (unsigned tx = 0; tx < 4; ++tx)
            CHECK(out[(by * 2 + bx) * 16 + (tz * 2 + ty) * 4 + tx] ==
                  static_cast<int>(bx + 10 * by + 100 * tx + 1000 * ty + 10000 * tz));
}

TEST_CASE("__syncthreads orders static shared memory and __syncthreads_count counts", "[emu]") {
  auto& p = probe();
  std::vector<float> in(4 * 256);
  std::iota(in.begin(), in.end(), 0.f);
  float* out = p.buffer("out", std::vector<float>(in.size()));
  const float* din = p.buffer("in", in);
  int* counts = p.buffer("counts", std::vector<int>(4));
  const auto stats =
      p.launch(kReverse, {4, 1, 1}, {256, 1, 1}, ktune::templates::ArgPack().add(out).add(din).add(counts));
  for (int b = 0; b < 4; ++b) {
    CHECK(counts[b] == 64);
    for (int t = 0; t < 256; ++t) CHECK(out[b * 256 + t] == in[b * 256 + 255 - t]);
  }
  CHECK(stats.thread_barriers == 4 * 2 * 256);
}

TEST_CASE("warp shuffles, votes and reductions follow CUDA's definitions", "[emu]") {
  auto& p = probe();
  int* out = p.buffer("out", std::vector<int>(64 * 10));
  p.launch(kWarp, {1, 1, 1}, {64, 1, 1}, ktune::templates::ArgPack().add(out));
  unsigned ballot = 0;
  for (int l = 0; l < 32; l += 3) ballot |= 1u << l;
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32;
    const int* o = out + t * 10;
    CHECK(o[0] == (lane + 5) % 32 * 3);
    CHECK(o[1] == (lane ^ 7));
    CHECK(o[2] == (lane + 3 < 32 ? lane + 3 : lane));
    CHECK(o[3] == (lane >= 2 ? lane - 2 : lane));
    CHECK(static_cast<unsigned>(o[4]) == ballot);
    CHECK(o[5] == 1 + 2);
    CHECK(o[6] == 496 + 31 * 1000);
    CHECK(o[7] == (lane & ~7));
    CHECK(o[8] == (lane < 16 ? 15 : 16));
    CHECK(o[9] == 496);
  }
}

TEST_CASE("atomics are exact across blocks running on several workers", "[emu]") {
  auto& p = probe();
  float* fsum = p.buffer("fsum", std::vector<float>(1, 0.f));
  int* isum = p.buffer("isum", std::vector<int>(1, 0));
  int* imax = p.buffer("imax", std::vector<int>(1, 0));
  p.launch(kAtomics, {8, 1, 1}, {256, 1, 1}, ktune::templates::ArgPack().add(fsum).add(isum).add(imax));
  CHECK(*fsum == 2048.f);
  CHECK(*isum == 8 * 255 * 256 / 2);
  int expected_max = 0;
  for (int b = 0; b < 8; ++b)
    for (int t = 0; t < 256; ++t) expected_max = std::max(expected_max, (t * 7 + b * 13) % 1000);
  CHECK(*imax == expected_max);
}

TEST_CASE("block- and system-scoped atomics act as the device-scoped ones, and clock() counts", "[emu]") {
  auto& p = probe();
  int* isum = p.buffer("isum", std::vector<int>{0});
  float* fsum = p.buffer("fsum", std::vector<float>{0.f});
  int* imax = p.buffer("imax", std::vector<int>{-1, 0});
  int* ticking = p.buffer("ticking", std::vector<int>(3));
  p.launch(kScoped, {3, 1, 1}, {64, 1, 1}, ktune::templates::ArgPack().add(isum).add(fsum).add(imax).add(ticking));
  CHECK(isum[0] == 192);
  CHECK(fsum[0] == 384.f);
  CHECK(imax[0] == 63);
  CHECK(imax[1] == 7);
  CHECK(ticking[0] + ticking[1] + ticking[2] == 3);
}

TEST_CASE("dynamic shared memory holds the launch's bytes", "[emu]") {
  auto& p = probe();
  float* out = p.buffer("out", std::vector<float>(96));
  p.launch(kDynamic, {1, 1, 1}, {96, 1, 1}, ktune::templates::ArgPack().add(out).add(96), 96 * sizeof(float));
  for (int t = 0; t < 96; ++t) CHECK(out[t] == static_cast<float>((t + 1) % 96));
}

TEST_CASE("bf16 and fp16 conversions round to nearest even", "[emu]") {
  auto& p = probe();
  const float nan = std::nanf("");
  // value, bf16 bits, fp16 bits
  const std::vector<std::tuple<float, unsigned, unsigned>> cases = {
      {1.0f, 0x3f80, 0x3c00},
      {1.0f + 1.0f / 256, 0x3f80, 0x3c04},      // bf16 tie -> even (down)
      {1.0f + 3.0f / 256, 0x3f82, 0x3c0c},      // bf16 tie -> even (up)
      {1.0f + 1.0f / 2048, 0x3f80, 0x3c00},     // fp16 tie -> even (down)
      {1.0f + 3.0f / 2048, 0x3f80, 0x3c02},     // fp16 tie -> even (up)
      {-2.5f, 0xc020, 0xc100},
      {65504.0f, 0x4780, 0x7bff},               // bf16 rounds up to 65536,
      {65520.0f, 0x4780, 0x7c00},               // rounds to fp16 infinity
      {std::ldexp(1.0f, -24), 0x3380, 0x0001},  // smallest fp16 subnormal
      {std::ldexp(1.0f, -25), 0x3300, 0x0000},  // tie -> even (zero)
      {std::ldexp(1.5f, -25), 0x3340, 0x0001},
      {std::ldexp(3.0f, -16), 0x3840, 0x0300},  // fp16 subnormal, exact
      {nan, 0x7fc0, 0x7e00},
      {1.0f / 3.0f, 0x3eab, 0x3555},
  };
  std::vector<float> in;
  for (auto& c : cases) in.push_back(std::get<0>(c));
  const int n = static_cast<int>(in.size());
  auto* bf = p.buffer("bf", std::vector<unsigned short>(n));
  auto* hf = p.buffer("hf", std::vector<unsigned short>(n));
  float* back = p.buffer("back", std::vector<float>(n));
  const float* din = p.buffer("in", in);
  p.launch(kConvert, {1, 1, 1}, {static_cast<unsigned>(n), 1, 1},
           ktune::templates::ArgPack().add(bf).add(hf).add(back).add(din));
  for (int i = 0; i < n; ++i) {
    INFO("value " << in[i]);
    CHECK(bf[i] == std::get<1>(cases[i]));
    CHECK(hf[i] == std::get<2>(cases[i]));
  }
  CHECK(back[0] == 1.0f);
  CHECK(back[8] == std::ldexp(1.0f, -24));
  CHECK(std::isinf(back[7]));
}

TEST_CASE("vector types, __ldg and fast-math intrinsics", "[emu]") {
  auto& p = probe();
  std::vector<float> in(4 * 32);
  std::iota(in.begin(), in.end(), 0.f);
  auto* din = reinterpret_cast<const float*>(p.buffer("in", in));
  auto* out = p.buffer("out", std::vector<float>(4 * 32));
  p.launch(kVector, {1, 1, 1}, {32, 1, 1}, ktune::templates::ArgPack().add(out).add(din));
  for (int t = 0; t < 32; ++t) {
    CHECK(out[4 * t] == in[4 * t + 3]);
    CHECK(out[4 * t + 1] == in[4 * t + 2]);
    CHECK(out[4 * t + 2] == 1.5f);
    CHECK(out[4 * t + 3] == 8.25f);
  }
}

}  // namespace tuner_emu_device_api_emu_test
