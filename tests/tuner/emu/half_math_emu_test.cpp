// cuda_fp16.h's and cuda_bf16.h's functions in the host half, bit for bit:
// __hmax / __hmin with a NaN input (the other input), their _nan forms and
// pairs, __hfma rounded once, double converted to __half / __nv_bfloat16
// rounded once, __hisnan / __hisinf, and atomicAdd on the 16-bit types.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "tuner/emu_probe.hpp"

namespace tuner_emu_half_math_emu_test {

namespace {

using ktune::templates::ArgPack;

const char* kProbe = R"(
__global__ void k_half_math(unsigned short* out, const unsigned short* in, const double* d) {
  const __half nan = __ushort_as_half(0x7e00), one = __float2half(1.f), two = __float2half(2.f);
  const __half pz = __ushort_as_half(0x0000), mz = __ushort_as_half(0x8000);
  const __nv_bfloat16 bnan = __ushort_as_bfloat16(0x7fc0), bone = __float2bfloat16(1.f);
  out[0] = __half_as_ushort(__hmax(nan, one));
  out[1] = __half_as_ushort(__hmax(one, nan));
  out[2] = __half_as_ushort(__hmin(nan, one));
  out[3] = __half_as_ushort(__hmax(nan, nan));
  out[4] = __half_as_ushort(__hmax_nan(one, nan));
  out[5] = __half_as_ushort(__hmin_nan(nan, one));
  out[6] = __half_as_ushort(__hmax(pz, mz));
  out[7] = __half_as_ushort(__hmin(pz, mz));
  const __half2 m = __hmax2(__half2{nan, two}, __half2{one, nan});
  out[8] = __half_as_ushort(m.x);
  out[9] = __half_as_ushort(m.y);
  // a * b + c whose float sum, rounded again to the type, lands on the other side of a tie.
  out[10] = __half_as_ushort(__hfma(__ushort_as_half(in[0]), __ushort_as_half(in[1]), __ushort_as_half(in[2])));
  out[11] = __half_as_ushort(__hfma(__ushort_as_half(in[3]), __ushort_as_half(in[4]), __ushort_as_half(in[5])));
  out[12] = __bfloat16_as_ushort(
      __hfma(__ushort_as_bfloat16(in[6]), __ushort_as_bfloat16(in[7]), __ushort_as_bfloat16(in[8])));
  out[13] = __bfloat16_as_ushort(
      __hfma(__ushort_as_bfloat16(in[9]), __ushort_as_bfloat16(in[10]), __ushort_as_bfloat16(in[11])));
  out[14] = __half_as_ushort(__double2half(d[0]));
  out[15] = __bfloat16_as_ushort(__double2bfloat16(d[1]));
  out[16] = __half_as_ushort(__half(d[0]));
  out[17] = __bfloat16_as_ushort(__nv_bfloat16(d[1]));
  out[18] = __bfloat16_as_ushort(__hmax(bnan, bone));
  out[19] = __bfloat16_as_ushort(__hmin_nan(bone, bnan));
  out[20] = __hisnan(nan) + 2 * __hisnan(one) + 4 * (__hisinf(__ushort_as_half(0xfc00)) == -1) +
            8 * __hisinf(bone);
  const __nv_bfloat162 b = __hmin2(__nv_bfloat162{bnan, bone}, __nv_bfloat162{bone, bnan});
  out[21] = __bfloat16_as_ushort(b.x);
  out[22] = __bfloat16_as_ushort(b.y);
}
__global__ void k_half_atomics(__half* h, __half2* h2, __nv_bfloat16* b, __nv_bfloat162* b2) {
  atomicAdd(h, __float2half(1.f));
  atomicAdd(h2, __half2{__float2half(1.f), __float2half(2.f)});
  atomicAdd(b, __float2bfloat16(1.f));
  atomicAdd(b2, __nv_bfloat162{__float2bfloat16(1.f), __float2bfloat16(2.f)});
}
)";

ktune::test::EmuProbe& probe() {
  static ktune::test::EmuProbe p(kProbe, {"k_half_math", "k_half_atomics"});
  return p;
}

}  // namespace

TEST_CASE("fp16 and bf16 max and min, fused multiply-add and conversions from double follow cuda_fp16.h",
          "[emu]") {
  auto& p = probe();
  unsigned short* out = p.buffer("out", std::vector<unsigned short>(23, 0xdead));
  const unsigned short* in = p.buffer("in", std::vector<unsigned short>{0x3950, 0x7bc0, 0x92ee, 0x6600, 0x4afe,
                                                                         0x0c24, 0x4bc0, 0x6742, 0x8f3d, 0x4298,
                                                                         0x4ff0, 0x10b3});
  // Just above a tie of the 16-bit type that the nearest float sits on: through float it rounds to even, down.
  const double* d = p.buffer("d", std::vector<double>{1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40),
                                                      1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)});
  p.launch(0, {1, 1, 1}, {1, 1, 1}, ArgPack().add(out).add(in).add(d));
  const std::vector<unsigned short> want = {0x3c00, 0x3c00, 0x3c00, 0x7fff, 0x7fff, 0x7fff, 0x0000, 0x8000,
                                            0x3c00, 0x4000, 0x7925, 0x753f, 0x7391, 0x530f, 0x3c01, 0x3f81,
                                            0x3c01, 0x3f81, 0x3f80, 0x7fff, 5,      0x3f80, 0x3f80};
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("output " << i);
    CHECK(out[i] == want[i]);
  }
}

TEST_CASE("atomicAdd on __half, __half2, __nv_bfloat16 and __nv_bfloat162 adds every thread's value", "[emu]") {
  auto& p = probe();
  auto* h = p.buffer("h", std::vector<unsigned short>{0});
  auto* h2 = p.buffer("h2", std::vector<unsigned short>{0, 0});
  auto* b = p.buffer("b", std::vector<unsigned short>{0});
  auto* b2 = p.buffer("b2", std::vector<unsigned short>{0, 0});
  // 4 blocks of 64 threads on two workers: sums up to 512, exact in both types.
  p.launch(1, {4, 1, 1}, {64, 1, 1}, ArgPack().add(h).add(h2).add(b).add(b2));
  CHECK(h[0] == 0x5c00);   // 256 in fp16
  CHECK(h2[0] == 0x5c00);
  CHECK(h2[1] == 0x6000);  // 512
  CHECK(b[0] == 0x4380);   // 256 in bf16
  CHECK(b2[0] == 0x4380);
  CHECK(b2[1] == 0x4400);  // 512
}

}  // namespace tuner_emu_half_math_emu_test
