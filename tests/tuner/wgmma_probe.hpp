// Probe kernels for wgmma.mma_async (templates/common/wgmma.cuh), with checks
// written once for any probe backend: the emulation (tuner/emu_probe.hpp) and
// a Hopper GPU (tuner/gpu_probe.hpp, sm_90a) run the same kernels on the same
// inputs. The host places each operand in shared memory the way a kernel
// would (row-major panels with XOR-swizzled 16-byte chunks, or 8 x 8 core
// matrices), builds the descriptors from the panels' strides, and compares
// the 64 x N product with fp64; a descriptor that names another swizzle than
// the data's must give a wrong product.
#pragma once
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "templates/family.hpp"
#include "templates/render.hpp"

namespace ktune::test::wgmma {

inline const char* kSource = R"(
// One operand's descriptor fields and its start's advance per k16 step.
struct Operand {
  int offset, swizzle, lbo, sbo, step;
};

// D (64 x N) = A (64 x 16 KSTEPS) * B (16 KSTEPS x N) over one warpgroup,
// written row-major to `out`. `image` (words) is copied into dynamic shared
// memory first; A comes from it (RS 0) or from `a_rows` (RS 1: row-major
// 16-bit bits of A) through mma.m16n8k16's A fragments.
// `base` receives the address descriptors hold for the start of dynamic
// shared memory (a swizzle pattern follows the address bits).
template <int N, int RS, int TRANS_A, int TRANS_B, int KSTEPS, class T>
__global__ void k_wgmma(float* out, const unsigned* image, int image_words, Operand a, Operand b,
                        const unsigned short* a_rows, unsigned* base) {
  unsigned char* smem = kt::dynamic_shared<unsigned char>();
  if (threadIdx.x == 0) *base = kt::wgmma_address(smem);
  for (int i = threadIdx.x; i < image_words; i += blockDim.x) reinterpret_cast<unsigned*>(smem)[i] = image[i];
  __syncthreads();
  kt::fence_proxy_async();
  const int warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  unsigned af[KSTEPS][4];
  if (RS) {
    auto at = [&](int r, int k) { return static_cast<unsigned>(a_rows[(16 * warp + r) * 16 * KSTEPS + k]); };
    for (int s = 0; s < KSTEPS; ++s) {
      const int k = 16 * s + 2 * t;
      af[s][0] = at(g, k) | at(g, k + 1) << 16;
      af[s][1] = at(g + 8, k) | at(g + 8, k + 1) << 16;
      af[s][2] = at(g, k + 8) | at(g, k + 9) << 16;
      af[s][3] = at(g + 8, k + 8) | at(g + 8, k + 9) << 16;
    }
  }
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i) d[i] = 1000.0f;  // overwritten: the first step does not accumulate
  kt::wgmma_fence();
  for (int s = 0; s < KSTEPS; ++s) {
    const unsigned long long db = kt::wgmma_desc(smem + b.offset + s * b.step, b.swizzle, b.lbo, b.sbo);
    if (RS) {
      kt::wgmma_rs<N, T, TRANS_B>(d, af[s], db, s > 0);
    } else {
      const unsigned long long da = kt::wgmma_desc(smem + a.offset + s * a.step, a.swizzle, a.lbo, a.sbo);
      kt::wgmma_ss<N, T, TRANS_A, TRANS_B>(d, da, db, s > 0);
    }
  }
  kt::wgmma_commit();
  kt::wgmma_wait<0>();
  kt::wgmma_fence_operand(d);
  for (int j = 0; j < N / 8; ++j)
    for (int e = 0; e < 4; ++e) out[(16 * warp + g + 8 * (e / 2)) * N + 8 * j + 2 * t + e % 2] = d[4 * j + e];
}

// D of a wgmma read before (`before`) and after (`after`) its wait: whether
// it completed early shows. With FINISH 0 the thread ends with it in flight.
template <int FINISH>
__global__ void k_wgmma_unwaited(float* before, float* after, const unsigned* image, int image_words, Operand a,
                                 Operand b) {
  unsigned char* smem = kt::dynamic_shared<unsigned char>();
  for (int i = threadIdx.x; i < image_words; i += blockDim.x) reinterpret_cast<unsigned*>(smem)[i] = image[i];
  __syncthreads();
  float d[8];
  for (int i = 0; i < 8; ++i) d[i] = 1000.0f;
  kt::wgmma_fence();
  kt::wgmma_ss<16, __nv_bfloat16, 0, 0>(d, kt::wgmma_desc(smem + a.offset, a.swizzle, a.lbo, a.sbo),
                                         kt::wgmma_desc(smem + b.offset, b.swizzle, b.lbo, b.sbo), false);
  kt::wgmma_commit();
  before[threadIdx.x] = d[0];
  if (FINISH) {
    kt::wgmma_wait<0>();
    after[threadIdx.x] = d[0];
  }
}
)";

/// How the host lays out one operand (rows i = M for A, N for B; k its depth).
struct Layout {
  bool mn_major = false;  ///< i contiguous (panel rows are k) instead of k
  int chunks = 8;         ///< 16-byte chunks per panel row: 1 (8 x 8 core matrices), 2, 4, 8 (32/64/128-byte swizzle)
  int base = 0;           ///< byte offset in shared memory (a multiple of 1024)
  int lbo = 0, sbo = 0;   ///< the descriptor's offsets (bytes), as the placement below uses them
  int swizzle_named = -1; ///< the descriptor's swizzle mode if not the data's (a wrong descriptor)

  int swizzle() const {
    if (swizzle_named >= 0) return swizzle_named;
    return chunks == 8 ? 1 : chunks == 4 ? 2 : chunks == 2 ? 3 : 0;
  }
  /// Byte offset of element (i, k): panels of 8-row atoms, chunks XOR-swizzled by address.
  int place(int i, int k) const {
    int x;
    if (!mn_major) {
      x = chunks == 1 ? (i / 8) * sbo + (k / 8) * lbo + (i % 8) * 16 + (k % 8) * 2
                      : (i / 8) * sbo + (i % 8) * 16 * chunks + k * 2;
    } else {
      x = chunks == 1 ? (i / 8) * sbo + (k / 8) * lbo + (k % 8) * 16 + (i % 8) * 2
                      : (i / (8 * chunks)) * lbo + (k / 8) * sbo + (k % 8) * 16 * chunks + (i % (8 * chunks)) * 2;
    }
    x += base;
    return x ^ ((x >> 7) & (chunks - 1)) << 4;
  }
  /// The start's advance per k16 step.
  int step() const {
    if (!mn_major) return chunks == 1 ? 2 * lbo : 32;
    return chunks == 1 ? 2 * lbo : 2 * sbo;
  }
};

/// The kernel's Operand argument (same layout as the device struct).
struct Operand {
  int offset, swizzle, lbo, sbo, step;
};
inline Operand operand(const Layout& l) { return {l.base, l.swizzle(), l.lbo, l.sbo, l.step()}; }

struct Case {
  const char* name;
  int n;
  bool rs, bf16;
  int ksteps;
  Layout a, b;
  bool wrong = false;  ///< a descriptor names another swizzle than the data's
};

/// The cases: every swizzle mode, both majors of A and B, several N, the
/// register form, and k steps advancing the start inside swizzled rows.
inline std::vector<Case> cases() {
  auto k_major = [](int chunks, int base, int lbo, int sbo) { return Layout{false, chunks, base, lbo, sbo}; };
  auto mn_major = [](int chunks, int base, int lbo, int sbo) { return Layout{true, chunks, base, lbo, sbo}; };
  std::vector<Case> c = {
      // A: 8 k-cores of 128 bytes side by side (LBO 128), row groups 256 apart; B's cores the other way round.
      {"ss, K-major, no swizzle, N 64, bf16", 64, false, true, 2, k_major(1, 0, 128, 512), k_major(1, 8192, 1024, 128)},
      {"ss, K-major, 128-byte swizzle, N 128, 4 k steps in one row, bf16", 128, false, true, 4,
       k_major(8, 0, 16, 1024), k_major(8, 8192, 16, 1024)},
      {"ss, K-major, 64-byte swizzle, N 32, f16", 32, false, false, 2, k_major(4, 0, 16, 512),
       k_major(4, 8192, 16, 512)},
      {"ss, K-major, 32-byte swizzle, N 16, bf16", 16, false, true, 1, k_major(2, 0, 16, 256),
       k_major(2, 4096, 16, 256)},
      // B as V in P V: key rows of 64 head-dim elements (128 bytes), a second panel of 64 at LBO.
      {"ss, A K-major, B N-major 128-byte swizzle over two panels, N 128, bf16", 128, false, true, 2,
       k_major(8, 0, 16, 1024), mn_major(8, 8192, 4096, 1024)},
      {"ss, A M-major 64-byte swizzle, B K-major no swizzle, N 64, f16", 64, false, false, 1,
       mn_major(4, 0, 2048, 512), k_major(1, 8192, 1024, 128)},
      {"ss, B N-major no swizzle, N 32, bf16", 32, false, true, 2, k_major(8, 0, 16, 1024),
       mn_major(1, 8192, 128, 512)},
      {"ss, K-major, 128-byte swizzle, N 256, bf16", 256, false, true, 1, k_major(8, 0, 16, 1024),
       k_major(8, 8192, 16, 1024)},
      {"ss, K-major, 128-byte swizzle, N 96, f16", 96, false, false, 1, k_major(8, 0, 16, 1024),
       k_major(8, 8192, 16, 1024)},
      {"ss, K-major, 128-byte swizzle, N 192, bf16", 192, false, true, 1, k_major(8, 0, 16, 1024),
       k_major(8, 8192, 16, 1024)},
      {"rs, B K-major 128-byte swizzle, N 64, 4 k steps, bf16", 64, true, true, 4, Layout{},
       k_major(8, 0, 16, 1024)},
      {"rs, B N-major 128-byte swizzle, N 64, 2 k steps, f16", 64, true, false, 2, Layout{},
       mn_major(8, 0, 16, 1024)},
  };
  Case wrong = c[1];
  wrong.name = "ss, data 128-byte swizzled, descriptors say none";
  wrong.a.swizzle_named = 0;
  wrong.b.swizzle_named = 0;
  wrong.wrong = true;
  c.push_back(wrong);
  return c;
}

inline std::string kernel_name(const Case& c) {
  return "k_wgmma<" + std::to_string(c.n) + ", " + (c.rs ? "1" : "0") + ", " + (c.a.mn_major ? "1" : "0") + ", " +
         (c.b.mn_major ? "1" : "0") + ", " + std::to_string(c.ksteps) + ", " +
         (c.bf16 ? "__nv_bfloat16" : "__half") + ">";
}

/// Every case's kernel, then the two k_wgmma_unwaited.
inline std::vector<std::string> kernels() {
  std::vector<std::string> k;
  for (const Case& c : cases()) k.push_back(kernel_name(c));
  k.push_back("k_wgmma_unwaited<1>");
  k.push_back("k_wgmma_unwaited<0>");
  return k;
}
inline int unwaited_kernel(bool finish) { return static_cast<int>(cases().size()) + (finish ? 0 : 1); }

inline std::uint16_t half_bits(float f) {  // fp16 bits of a value exact in fp16 (|f| <= 1, 8 significant bits)
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint32_t sign = (u >> 16) & 0x8000u, e = (u >> 23) & 0xffu, m = u & 0x7fffffu;
  if (f == 0.0f) return static_cast<std::uint16_t>(sign);
  return static_cast<std::uint16_t>(sign | ((e - 112) << 10) | (m >> 13));
}

/// Random operands exact in bf16 and fp16, placed in a shared-memory image.
struct Operands {
  int k = 0;
  std::vector<double> a, b;              // A (64 x k), B (k x n), row-major
  std::vector<unsigned short> a_bits;    // A's 16-bit bits, row-major (the register form's input)
  std::vector<unsigned> image;           // shared memory, as words
};

inline Operands make_operands(const Case& c, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  Operands o;
  o.k = 16 * c.ksteps;
  std::vector<unsigned char> bytes(16384 + 64 * 1024, 0);
  std::size_t used = 0;
  auto value = [&](unsigned short& bits) {
    float x = dist(rng);
    if (std::fabs(x) < 1e-4f) x = 0.0f;
    const std::uint16_t h = templates::float_to_bf16_bits(x);
    const float v = templates::bf16_bits_to_float(h);
    bits = c.bf16 ? h : half_bits(v);
    return static_cast<double>(v);
  };
  bool outside = false;  // a placement past the image: a case that does not fit
  auto put = [&](const Layout& l, int i, int k, unsigned short bits) {
    const auto at = static_cast<std::size_t>(l.place(i, k));
    if (at + 2 > bytes.size()) return void(outside = true);
    std::memcpy(bytes.data() + at, &bits, 2);
    used = std::max(used, at + 2);
  };
  o.a.resize(static_cast<std::size_t>(64 * o.k));
  o.a_bits.resize(o.a.size());
  for (int m = 0; m < 64; ++m)
    for (int k = 0; k < o.k; ++k) {
      unsigned short bits;
      o.a[m * o.k + k] = value(bits);
      o.a_bits[m * o.k + k] = bits;
      if (!c.rs) put(c.a, m, k, bits);
    }
  o.b.resize(static_cast<std::size_t>(o.k * c.n));
  for (int k = 0; k < o.k; ++k)
    for (int n = 0; n < c.n; ++n) {
      unsigned short bits;
      o.b[k * c.n + n] = value(bits);
      put(c.b, n, k, bits);
    }
  REQUIRE_FALSE(outside);
  bytes.resize((used + 1023) / 1024 * 1024);
  o.image.resize(bytes.size() / 4);
  std::memcpy(o.image.data(), bytes.data(), bytes.size());
  return o;
}

/// The 64 x N result of one case and its relative L2 error against fp64.
struct Product {
  std::vector<float> d;
  double error = 0;
  unsigned base = 0;  ///< the shared address of dynamic shared memory's start
};

template <class P>
Product run(P& p, int kernel, const Case& c, unsigned seed = 1) {
  const Operands o = make_operands(c, seed);
  float* out = p.buffer("out", std::vector<float>(static_cast<std::size_t>(64 * c.n), -7.0f));
  unsigned* base = p.buffer("base", std::vector<unsigned>{~0u});
  const auto words = static_cast<int>(o.image.size());
  p.launch(kernel, {1, 1, 1}, {128, 1, 1},
           templates::ArgPack()
               .add(out)
               .add(static_cast<const unsigned*>(p.buffer("image", o.image)))
               .add(words)
               .add(operand(c.a))
               .add(operand(c.b))
               .add(static_cast<const unsigned short*>(p.buffer("a_rows", o.a_bits)))
               .add(base),
           static_cast<unsigned>(o.image.size() * 4));
  Product r;
  r.base = p.read(base, 1)[0];
  r.d = p.read(out, static_cast<std::size_t>(64 * c.n));
  double num = 0, den = 0;
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < c.n; ++n) {
      double ref = 0;
      for (int k = 0; k < o.k; ++k) ref += o.a[m * o.k + k] * o.b[k * c.n + n];
      const double diff = r.d[m * c.n + n] - ref;
      num += diff * diff;
      den += ref * ref;
    }
  r.error = std::sqrt(num / den);
  return r;
}

/// k_wgmma_unwaited's D before and after the wait (128 threads each).
struct Unwaited {
  std::vector<float> before, after;
  float product0 = 0;  ///< what thread 0's d[0] must hold once complete
};

template <class P>
Unwaited run_unwaited(P& p, bool finish) {
  const Case c = cases()[3];  // 32-byte swizzle, N 16, bf16, one k step
  const Operands o = make_operands(c, 5);
  float* before = p.buffer("before", std::vector<float>(128, -7.0f));
  float* after = p.buffer("after", std::vector<float>(128, -7.0f));
  p.launch(unwaited_kernel(finish), {1, 1, 1}, {128, 1, 1},
           templates::ArgPack()
               .add(before)
               .add(after)
               .add(static_cast<const unsigned*>(p.buffer("image", o.image)))
               .add(static_cast<int>(o.image.size()))
               .add(operand(c.a))
               .add(operand(c.b)),
           static_cast<unsigned>(o.image.size() * 4));
  Unwaited u;
  u.before = p.read(before, 128);
  u.after = p.read(after, 128);
  for (int k = 0; k < o.k; ++k) u.product0 += static_cast<float>(o.a[k] * o.b[k * c.n]);
  return u;
}

}  // namespace ktune::test::wgmma
