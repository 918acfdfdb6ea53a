// The host GEMM engine (the emu backend's GEMMs) models the device's
// numerics: a tf32 GEMM reads its inputs rounded to tf32, bf16 operands are
// read as bf16 and a bf16 product is rounded to bf16. Checked against a
// double reference on operands rounded here, independently, with the
// product's buffer poisoned first.
#include "model/ops/device_ops.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "templates/render.hpp"

namespace model_ops_device_ops_emu_test {

using namespace ktune;
using templates::DType;

namespace {

// x rounded to 10 mantissa bits, to nearest, ties away from zero (cvt.rna.tf32.f32).
double tf32_of(float x) {
  int e = 0;
  const double m = std::frexp(static_cast<double>(x), &e);  // |m| in [0.5, 1): 11 significant bits are m * 2^11
  return std::ldexp(std::round(m * 2048.0) / 2048.0, e);
}

struct Gemm {
  std::int64_t m = 13, n = 7, k = 37;  // odd sizes: no blocking hides a slip
  std::vector<float> a, b;             // (m, k), (n, k): C = A B^T
};

// Relative L2 error of got against C = A B^T computed in double on `round`ed operands.
template <class Round>
double error_against(const Gemm& g, const std::vector<double>& got, Round round) {
  double num = 0, den = 0;
  for (std::int64_t i = 0; i < g.m; ++i)
    for (std::int64_t j = 0; j < g.n; ++j) {
      double want = 0;
      for (std::int64_t p = 0; p < g.k; ++p) want += round(g.a[i * g.k + p]) * round(g.b[j * g.k + p]);
      const double d = got[i * g.n + j] - want;
      num += d * d;
      den += want * want;
    }
  return std::isnan(num) ? INFINITY : std::sqrt(num / den);
}

// Runs C = A B^T through the host engine with the given operand types.
std::vector<double> run(const Gemm& g, DType ab, DType c, bool tf32) {
  auto backend = tuner::exec::make_emu_backend();
  const std::size_t a_at = 0, b_at = 4096, c_at = 8192;
  auto arena = backend->allocate(16384, "gemm test");
  backend->poison(*arena);
  const auto put = [&](std::size_t at, const std::vector<float>& v) {
    if (ab == DType::kF32) return backend->upload_range(*arena, at, v.data(), v.size() * 4);
    std::vector<std::uint16_t> bits(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) bits[i] = templates::float_to_bf16_bits(v[i]);
    backend->upload_range(*arena, at, bits.data(), bits.size() * 2);
  };
  put(a_at, g.a);
  put(b_at, g.b);
  auto engine = model::make_host_gemm(*backend, *arena);
  const std::uint64_t base = arena->address();
  engine->gemm({.trans_a = false, .trans_b = true, .m = g.m, .n = g.n, .k = g.k, .a = base + a_at, .b = base + b_at,
                .c = base + c_at, .lda = g.k, .ldb = g.k, .ldc = g.n, .a_type = ab, .b_type = ab, .c_type = c,
                .tf32 = tf32});
  std::vector<double> out(static_cast<std::size_t>(g.m * g.n));
  if (c == DType::kF32) {
    std::vector<float> f(out.size());
    backend->download_range(f.data(), *arena, c_at, f.size() * 4);
    std::copy(f.begin(), f.end(), out.begin());
  } else {
    std::vector<std::uint16_t> bits(out.size());
    backend->download_range(bits.data(), *arena, c_at, bits.size() * 2);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = templates::bf16_bits_to_float(bits[i]);
  }
  return out;
}

Gemm random_gemm(std::uint64_t seed) {
  Gemm g;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  g.a.resize(g.m * g.k);
  g.b.resize(g.n * g.k);
  for (auto& x : g.a) x = u(rng);
  for (auto& x : g.b) x = u(rng);
  return g;
}

}  // namespace

TEST_CASE("host GEMM: a tf32 GEMM reads its inputs rounded to tf32, an fp32 one does not", "[emu][model][gemm]") {
  const Gemm g = random_gemm(5);
  const auto exact = [](float x) { return static_cast<double>(x); };
  const auto tf32 = run(g, DType::kF32, DType::kF32, true);
  CHECK(error_against(g, tf32, tf32_of) < 1e-6);  // fp32 accumulation of the rounded products
  CHECK(error_against(g, tf32, exact) > 5e-5);    // the rounding (u = 2^-11) shows
  const auto f32 = run(g, DType::kF32, DType::kF32, false);
  CHECK(error_against(g, f32, exact) < 1e-6);
  CHECK(error_against(g, f32, tf32_of) > 5e-5);
}

TEST_CASE("host GEMM: bf16 operands are read as bf16, accumulated in fp32, a bf16 product rounded",
          "[emu][model][gemm]") {
  const Gemm g = random_gemm(7);
  const auto bf16_of = [](float x) {
    return static_cast<double>(templates::bf16_bits_to_float(templates::float_to_bf16_bits(x)));
  };
  const auto to_f32 = run(g, DType::kBF16, DType::kF32, false);
  CHECK(error_against(g, to_f32, bf16_of) < 1e-6);
  const auto to_bf16 = run(g, DType::kBF16, DType::kBF16, false);
  const double e = error_against(g, to_bf16, bf16_of);
  CHECK(e < 2.0 / 256);  // one rounding to bf16 (u = 2^-9, RMS u/sqrt(3) relative)
  CHECK(e > 1e-5);       // and the product was rounded
  for (std::size_t i = 0; i < to_bf16.size(); ++i) {
    const auto f = static_cast<float>(to_f32[i]);
    CHECK(to_bf16[i] == templates::bf16_bits_to_float(templates::float_to_bf16_bits(f)));
  }
  CHECK_THROWS_WITH(run(g, DType::kBF16, DType::kF32, true), Catch::Contains("tf32"));
}

}  // namespace model_ops_device_ops_emu_test
