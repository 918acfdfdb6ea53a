// Probe kernels for mma.sync, ldmatrix, cp.async, ex2.approx and atomic_add2,
// with checks written once for any probe backend: the emulation
// (tuner/emu_probe.hpp) and a real GPU (tuner/gpu_probe.hpp) run the same
// kernels on the same inputs. Fragments are placed by the PTX ISA layouts; one
// kernel places A transposed and must get a wrong product.
//
// A probe P provides: `T* buffer(name, std::vector<T>)` (a device pointer),
// `std::vector<T> read(const T*, n)`, and `launch(kernel, grid, block, args)`.
#pragma once
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "templates/family.hpp"
#include "templates/render.hpp"

namespace ktune::test::matrix {

inline const char* kSource = R"(
// A (16xK), B (Kx8), C and D (16x8), all row-major; one warp.
// TYPE 0: bf16 bits, 1: fp16 bits. WRONG: A's fragments taken transposed.
template <int K, int TYPE, bool WRONG>
__global__ void k_mma16(float* d, const unsigned short* a, const unsigned short* b, const float* c) {
  const unsigned l = threadIdx.x, g = l / 4, t = l % 4;
  auto A = [&](unsigned r, unsigned k) -> unsigned { return WRONG ? a[k * 16 + r] : a[r * K + k]; };
  unsigned ra[K / 4], rb[K / 8];
  float rc[4], rd[4];
  for (int r = 0; r < K / 4; ++r) {
    const unsigned row = g + 8 * (r & 1), col = 2 * t + 8 * (r >> 1);
    ra[r] = A(row, col) | A(row, col + 1) << 16;
  }
  for (int r = 0; r < K / 8; ++r) {
    const unsigned k = 2 * t + 8 * r;
    rb[r] = static_cast<unsigned>(b[k * 8 + g]) | static_cast<unsigned>(b[(k + 1) * 8 + g]) << 16;
  }
  for (int i = 0; i < 4; ++i) rc[i] = c[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)];
  if (K == 16 && TYPE == 0) kt::mma_m16n8k16_bf16(rd, ra, rb, rc);
  if (K == 16 && TYPE == 1) kt::mma_m16n8k16_f16(rd, ra, rb, rc);
  if (K == 8 && TYPE == 0) kt::mma_m16n8k8_bf16(rd, ra, rb, rc);
  if (K == 8 && TYPE == 1) kt::mma_m16n8k8_f16(rd, ra, rb, rc);
  for (int i = 0; i < 4; ++i) d[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = rd[i];
}

__global__ void k_mma_tf32(float* d, const float* a, const float* b, const float* c) {
  const unsigned l = threadIdx.x, g = l / 4, t = l % 4;
  unsigned ra[4], rb[2];
  float rc[4], rd[4];
  for (int r = 0; r < 4; ++r) ra[r] = kt::float_to_tf32(a[(g + 8 * (r & 1)) * 8 + t + 4 * (r >> 1)]);
  for (int r = 0; r < 2; ++r) rb[r] = kt::float_to_tf32(b[(t + 4 * r) * 8 + g]);
  for (int i = 0; i < 4; ++i) rc[i] = c[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)];
  kt::mma_m16n8k8_tf32(rd, ra, rb, rc);
  for (int i = 0; i < 4; ++i) d[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = rd[i];
}

// A (16x16) and B (16x8) bf16 through cp.async and ldmatrix into an mma;
// `regs` receives the other ldmatrix variants for a layout check.
__global__ void k_ldmatrix(float* d, unsigned* regs, const kt::bf16* a, const kt::bf16* b) {
  __shared__ __align__(16) kt::bf16 as[16 * 16];
  __shared__ __align__(16) kt::bf16 bs[16 * 8];
  const unsigned l = threadIdx.x, g = l / 4, t = l % 4;
  kt::cp_async_16(as + 8 * l, a + 8 * l);
  kt::cp_async_commit();
  if (l < 16) kt::cp_async_16(bs + 8 * l, b + 8 * l);
  kt::cp_async_commit();
  kt::cp_async_wait<0>();
  __syncwarp();
  unsigned ra[4], rb[2];
  kt::ldmatrix_x4(ra, as + (l % 16) * 16 + 8 * (l / 16));
  kt::ldmatrix_x2_trans(rb, bs + (l % 16) * 8);
  const float c[4] = {0, 0, 0, 0};
  float rd[4];
  kt::mma_m16n8k16_bf16(rd, ra, rb, c);
  for (int i = 0; i < 4; ++i) d[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = rd[i];
  unsigned x1[1], x2[2], t1[1], t4[4];
  kt::ldmatrix_x1(x1, as + (l % 8) * 16);
  kt::ldmatrix_x2(x2, as + (l % 16) * 16);
  kt::ldmatrix_x1_trans(t1, as + (l % 8) * 16);
  kt::ldmatrix_x4_trans(t4, as + (l % 16) * 16 + 8 * (l / 16));
  unsigned* o = regs + 8 * l;
  o[0] = x1[0];
  o[1] = x2[0];
  o[2] = x2[1];
  o[3] = t1[0];
  for (int i = 0; i < 4; ++i) o[4 + i] = t4[i];
}

// cp.async groups: wait<1> completes all but the newest committed group.
__global__ void k_cp_async(float* out, const float* in) {
  __shared__ __align__(16) float s[3 * 128];
  const unsigned l = threadIdx.x;
  for (int i = 0; i < 12; ++i) s[32 * i + l] = -1.0f;
  __syncwarp();
  kt::cp_async_16(s + 4 * l, in + 4 * l);
  kt::cp_async_commit();
  kt::cp_async_16(s + 128 + 4 * l, in + 128 + 4 * l);
  kt::cp_async_commit();
  kt::cp_async_16_zfill(s + 256 + 4 * l, in + 256 + 4 * l, 4);
  kt::cp_async_wait<1>();
  out[l] = s[4 * l];
  out[288 + l] = s[128 + 4 * l];  // not yet waited for
  kt::cp_async_wait_all();
  for (int i = 0; i < 4; ++i) out[32 + 4 * l + i] = s[128 + 4 * l + i];
  for (int i = 0; i < 4; ++i) out[160 + 4 * l + i] = s[256 + 4 * l + i];
}

// ex2.approx.ftz.f32 of n inputs; one block.
__global__ void k_exp2(float* out, const float* in, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = kt::exp2_approx(in[i]);
}

// kt::atomic_add2 from every thread of the grid into PAIRS pairs of sums:
// thread i adds (in[2i], in[2i + 1]) to pair i % PAIRS.
__global__ void k_atomic_add2(float* sums, const float* in, int pairs) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  kt::atomic_add2(sums + 2 * (i % pairs), in[2 * i], in[2 * i + 1]);
}
)";

inline const std::vector<std::string> kKernels = {
    "k_mma16<16, 0, false>", "k_mma16<16, 1, false>", "k_mma16<8, 0, false>", "k_mma16<8, 1, false>",
    "k_mma16<16, 0, true>",  "k_mma_tf32",            "k_ldmatrix",           "k_cp_async", "k_exp2", "k_atomic_add2"};
enum { kBf16K16, kF16K16, kBf16K8, kF16K8, kBf16K16Wrong, kTf32, kLdmatrix, kCpAsync, kExp2, kAtomicAdd2 };

inline std::uint16_t half_bits(float f) {  // fp16 for values exact in fp16 after the bf16 step below
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint32_t sign = (u >> 16) & 0x8000u, e = (u >> 23) & 0xffu, m = u & 0x7fffffu;
  if (f == 0.0f) return static_cast<std::uint16_t>(sign);
  return static_cast<std::uint16_t>(sign | ((e - 112) << 10) | (m >> 13));
}

inline float tf32_round(float x) {  // cvt.rna.tf32.f32
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x1000u) & 0xffffe000u;
  std::memcpy(&x, &u, 4);
  return x;
}

/// Relative L2 error of `got` against the double-precision product A*B + C.
inline double matmul_error(const std::vector<float>& got, const std::vector<double>& a,
                           const std::vector<double>& b, const std::vector<float>& c, int k) {
  double num = 0, den = 0;
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      double ref = c[i * 8 + j];
      for (int x = 0; x < k; ++x) ref += a[i * k + x] * b[x * 8 + j];
      num += (got[i * 8 + j] - ref) * (got[i * 8 + j] - ref);
      den += ref * ref;
    }
  return std::sqrt(num / den);
}

/// The 16x8 result of one probe launch and its relative error against fp64.
struct Product {
  std::vector<float> d;
  double error = 0;
};

/// A 16-bit mma probe on random inputs (seeded by the kernel and K).
template <class P>
Product mma16(P& p, int kernel, int k, bool bf16) {
  std::mt19937_64 rng(static_cast<unsigned>(kernel * 7 + k));
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<unsigned short> abits(16 * 16), bbits(16 * 8);
  std::vector<double> a(16 * k), b(k * 8);
  std::vector<float> c(16 * 8);
  auto quantise = [&](float x, unsigned short& bits) {
    if (std::fabs(x) < 1e-4f) x = 0.0f;  // keep every value a normal fp16
    const std::uint16_t h = templates::float_to_bf16_bits(x);
    const float v = templates::bf16_bits_to_float(h);  // exact in both bf16 and fp16 (|v| <= 1, 8 bits)
    bits = bf16 ? h : half_bits(v);
    return static_cast<double>(v);
  };
  for (int i = 0; i < 16 * k; ++i) a[i] = quantise(dist(rng), abits[i]);
  for (int i = 0; i < k * 8; ++i) b[i] = quantise(dist(rng), bbits[i]);
  for (auto& x : c) x = dist(rng);
  float* d = p.buffer("d", std::vector<float>(16 * 8));
  const auto* da = p.buffer("a", abits);
  const auto* db = p.buffer("b", bbits);
  const float* dc = p.buffer("c", c);
  p.launch(kernel, {1, 1, 1}, {32, 1, 1}, templates::ArgPack().add(d).add(da).add(db).add(dc));
  Product r;
  r.d = p.read(d, 16 * 8);
  r.error = matmul_error(r.d, a, b, c, k);
  return r;
}

/// m16n8k8 tf32 against a naive matmul of tf32-rounded inputs.
template <class P>
Product mma_tf32(P& p) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> a(16 * 8), b(8 * 8), c(16 * 8);
  for (auto& x : a) x = dist(rng);
  for (auto& x : b) x = dist(rng);
  for (auto& x : c) x = dist(rng);
  std::vector<double> ar(a.size()), br(b.size());
  for (std::size_t i = 0; i < a.size(); ++i) ar[i] = tf32_round(a[i]);
  for (std::size_t i = 0; i < b.size(); ++i) br[i] = tf32_round(b[i]);
  float* d = p.buffer("d", std::vector<float>(16 * 8));
  p.launch(kTf32, {1, 1, 1}, {32, 1, 1},
           templates::ArgPack().add(d).add(p.buffer("a", a)).add(p.buffer("b", b)).add(p.buffer("c", c)));
  Product r;
  r.d = p.read(d, 16 * 8);
  r.error = matmul_error(r.d, ar, br, c, 8);
  return r;
}

/// ldmatrix x1/x2/x4 and .trans: the product through ldmatrix must be right
/// and every lane's registers must hold the elements the PTX layout names.
template <class P>
void check_ldmatrix(P& p) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<unsigned short> abits(16 * 16), bbits(16 * 8);
  std::vector<double> a(16 * 16), b(16 * 8);
  for (int i = 0; i < 256; ++i) {
    abits[i] = templates::float_to_bf16_bits(dist(rng));
    a[i] = templates::bf16_bits_to_float(abits[i]);
  }
  for (int i = 0; i < 128; ++i) {
    bbits[i] = templates::float_to_bf16_bits(dist(rng));
    b[i] = templates::bf16_bits_to_float(bbits[i]);
  }
  float* d = p.buffer("d", std::vector<float>(128));
  unsigned* regs_dev = p.buffer("regs", std::vector<unsigned>(32 * 8));
  p.launch(kLdmatrix, {1, 1, 1}, {32, 1, 1},
           templates::ArgPack().add(d).add(regs_dev).add(p.buffer("a", abits)).add(p.buffer("b", bbits)));
  CHECK(matmul_error(p.read(d, 128), a, b, std::vector<float>(128, 0.f), 16) < 1e-6);
  const std::vector<unsigned> regs = p.read(regs_dev, 32 * 8);
  auto A = [&](unsigned r, unsigned c) { return static_cast<unsigned>(abits[r * 16 + c]); };
  for (unsigned l = 0; l < 32; ++l) {
    const unsigned g = l / 4, t = l % 4;
    const unsigned* o = regs.data() + 8 * l;
    INFO("lane " << l);
    CHECK(o[0] == (A(g, 2 * t) | A(g, 2 * t + 1) << 16));
    CHECK(o[1] == (A(g, 2 * t) | A(g, 2 * t + 1) << 16));
    CHECK(o[2] == (A(8 + g, 2 * t) | A(8 + g, 2 * t + 1) << 16));
    CHECK(o[3] == (A(2 * t, g) | A(2 * t + 1, g) << 16));
    for (unsigned m = 0; m < 4; ++m) {
      const unsigned r0 = 8 * (m % 2), c0 = 8 * (m / 2);
      CHECK(o[4 + m] == (A(r0 + 2 * t, c0 + g) | A(r0 + 2 * t + 1, c0 + g) << 16));
    }
  }
}

/// What the newest group, still in flight after wait<1>, must read as.
enum class InFlight {
  kEither,     ///< hardware: landed or not
  kNotLanded,  ///< the emulation in order: copies land at their wait
  kLanded,     ///< the emulation reversed: copies land when issued
};

/// cp.async: groups complete at the covering wait, src-size < 16 zero-fills.
template <class P>
void check_cp_async(P& p, InFlight in_flight) {
  std::vector<float> in(384);
  for (int i = 0; i < 384; ++i) in[i] = static_cast<float>(i + 1);
  float* out_dev = p.buffer("out", std::vector<float>(320));
  p.launch(kCpAsync, {1, 1, 1}, {32, 1, 1}, templates::ArgPack().add(out_dev).add(p.buffer("in", in)));
  const std::vector<float> out = p.read(out_dev, 320);
  for (int l = 0; l < 32; ++l) {
    CHECK(out[l] == in[4 * l]);
    if (in_flight == InFlight::kNotLanded) CHECK(out[288 + l] == -1.0f);
    if (in_flight == InFlight::kLanded) CHECK(out[288 + l] == in[128 + 4 * l]);
    for (int i = 0; i < 4; ++i) CHECK(out[32 + 4 * l + i] == in[128 + 4 * l + i]);
    CHECK(out[160 + 4 * l] == in[256 + 4 * l]);
    for (int i = 1; i < 4; ++i) CHECK(out[160 + 4 * l + i] == 0.0f);
  }
}

/// kt::exp2_approx (ex2.approx.ftz.f32): within 2 ulp of 2^x where the
/// result is normal, +0 where it would be subnormal, 1 for a subnormal x
/// (read as 0), +0 at -inf, inf past 128, NaN for NaN; on seeded random x
/// over the whole range and on each edge.
template <class P>
void check_exp2(P& p) {
  std::vector<float> in = {-std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(), 0.0f, -0.0f, 1e-40f, -1e-40f, -126.0f,
                           -126.5f, -127.0f, -140.0f, -149.0f, -150.0f, 127.99f, 128.0f, 200.0f, 1.0f, -1.0f};
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<float> dist(-160.0f, 130.0f);
  for (int i = 0; i < 4096; ++i) in.push_back(dist(rng));
  const int n = static_cast<int>(in.size());
  float* out_dev = p.buffer("out", std::vector<float>(in.size(), 7.0f));
  p.launch(kExp2, {1, 1, 1}, {256, 1, 1}, templates::ArgPack().add(out_dev).add(p.buffer("in", in)).add(n));
  const std::vector<float> out = p.read(out_dev, in.size());
  for (int i = 0; i < n; ++i) {
    const float x = in[i], y = out[i];
    INFO("2^" << x << " = " << y);
    if (std::isnan(x)) {
      CHECK(std::isnan(y));
      continue;
    }
    const double exact = std::exp2(std::fpclassify(x) == FP_SUBNORMAL ? 0.0 : static_cast<double>(x));
    if (exact < std::numeric_limits<float>::min()) {
      CHECK((y == 0.0f && !std::signbit(y)));
    } else if (exact > std::numeric_limits<float>::max()) {
      CHECK(std::isinf(y));
    } else {
      const double ulp = std::nextafter(static_cast<float>(exact), std::numeric_limits<float>::infinity()) -
                         static_cast<float>(exact);
      CHECK(std::fabs(y - exact) <= 2 * ulp);
    }
  }
}

/// kt::atomic_add2: 8 blocks of 256 threads add small integers (exact in
/// fp32 in any order) into 96 pairs, starting from seeded values; every
/// pair's two sums must be exact, the first and second elements apart.
template <class P>
void check_atomic_add2(P& p) {
  constexpr int kBlocks = 8, kThreads = 256, kPairs = 96, kN = kBlocks * kThreads;
  std::mt19937_64 rng(23);
  std::uniform_int_distribution<int> value(-64, 64);
  std::vector<float> in(2 * kN), start(2 * kPairs);
  for (auto& x : in) x = static_cast<float>(value(rng));
  for (auto& x : start) x = static_cast<float>(value(rng));
  std::vector<double> expected(start.begin(), start.end());
  for (int i = 0; i < kN; ++i) {
    expected[2 * (i % kPairs)] += in[2 * i];
    expected[2 * (i % kPairs) + 1] += in[2 * i + 1];
  }
  float* sums = p.buffer("sums", start);
  p.launch(kAtomicAdd2, {kBlocks, 1, 1}, {kThreads, 1, 1},
           templates::ArgPack().add(sums).add(p.buffer("in", in)).add(kPairs));
  const std::vector<float> got = p.read(sums, 2 * kPairs);
  for (int i = 0; i < 2 * kPairs; ++i) {
    INFO("sum " << i);
    CHECK(got[i] == expected[i]);
  }
}

}  // namespace ktune::test::matrix
