// GEMM algorithm selection on a GPU (tuner/cuda/gemm_select.hpp): cuBLASLt's
// candidates timed, the choice stored, read back and checked by cuBLASLt, and
// the chosen algorithm's result against a loop. Skipped without a device.
#include "tuner/cuda/gemm_select.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "cache/store.hpp"
#include "support.hpp"
#include "templates/render.hpp"
#include "tuner/exec/backend.hpp"

namespace tuner_gemm_select_gpu_test {

using namespace ktune;

namespace {

// Relative L2 error of got (m, n) against A (m, k) B (n, k)^T summed in fp64.
double error_against_loop(const std::vector<float>& got, const std::vector<float>& a, const std::vector<float>& b,
                          std::int64_t m, std::int64_t n, std::int64_t k) {
  double num = 0, den = 0;
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double want = 0;
      for (std::int64_t p = 0; p < k; ++p) want += static_cast<double>(a[i * k + p]) * b[j * k + p];
      num += (got[i * n + j] - want) * (got[i * n + j] - want);
      den += want * want;
    }
  return std::sqrt(num / den);
}

}  // namespace

TEST_CASE("cuBLASLt algorithms chosen by timing round-trip through the tuned cache", "[gpu][cublaslt][gemm]") {
  test::skip_without_gpu();
  auto backend = tuner::exec::make_cuda_backend();
  auto workspace = backend->allocate(std::size_t{32} << 20, "cuBLASLt workspace");
  tuner::CublasLt lt(workspace->address(), workspace->bytes());
  const std::int64_t m = 256, n = 384, k = 192;
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> a(m * k), b(n * k);
  for (auto* v : {&a, &b})
    for (auto& x : *v) x = u(rng);
  auto da = backend->allocate(a.size() * 4, "a"), db = backend->allocate(b.size() * 4, "b"),
       dc = backend->allocate(m * n * 4, "c");
  backend->upload(*da, a.data(), a.size() * 4);
  backend->upload(*db, b.data(), b.size() * 4);
  const tuner::GemmDesc g{.trans_b = true, .m = m, .n = n, .k = k, .a = da->address(), .b = db->address(),
                          .c = dc->address(), .lda = k, .ldb = k, .ldc = n};

  const auto path = test::scratch_dir("gemm_select_gpu") / "tuned.json";
  cache::CacheFile file(path);
  auto trials = tuner::make_cublaslt_trials(*backend, lt, {.time = true, .warmup = 1, .min_repetitions = 3});
  tuner::GemmSelector first(*trials, backend->device(), nullptr, [&](const cache::Entry& e) { file.put(e); });
  const tuner::GemmAlgo chosen = first.choose(g);
  CHECK(first.counts().timed == 1);
  REQUIRE(file.load_input().size() == 1);

  const auto cache = cache::TunedCache::read(path);
  tuner::GemmSelector second(*trials, backend->device(), &cache, {});
  const tuner::GemmAlgo& again = second.choose(g);
  CHECK(second.counts().cached == 1);
  CHECK(second.counts().timed == 0);
  CHECK(again == chosen);
  CHECK(again.attributes == chosen.attributes);

  backend->poison(*dc);
  lt.matmul(g, backend->native_stream(), again);
  std::vector<float> got(m * n);
  backend->download(got.data(), *dc, got.size() * 4);
  CHECK(error_against_loop(got, a, b, m, n, k) < 1e-5);

  // Words that do not match their attributes are refused before they run.
  tuner::GemmAlgo tampered = again;
  tampered.attributes["tile"] += 1;
  CHECK_FALSE(lt.refusal(g, tampered).empty());
}

TEST_CASE("cuBLASLt algorithms for bf16 operands are timed and checked too (bf16 C and fp32 C)",
          "[gpu][cublaslt][gemm]") {
  test::skip_without_gpu();
  auto backend = tuner::exec::make_cuda_backend();
  auto workspace = backend->allocate(std::size_t{32} << 20, "cuBLASLt workspace");
  tuner::CublasLt lt(workspace->address(), workspace->bytes());
  const std::int64_t m = 200, n = 320, k = 136;  // the mixed-precision step's (tokens, out) x (out, in) shapes, small
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<std::uint16_t> a(m * k), b(n * k);
  std::vector<float> af(a.size()), bf(b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    af[i] = templates::bf16_bits_to_float(a[i] = templates::float_to_bf16_bits(u(rng)));
  for (std::size_t i = 0; i < b.size(); ++i)
    bf[i] = templates::bf16_bits_to_float(b[i] = templates::float_to_bf16_bits(u(rng)));
  auto da = backend->allocate(a.size() * 2, "a"), db = backend->allocate(b.size() * 2, "b"),
       dc = backend->allocate(m * n * 4, "c");
  backend->upload(*da, a.data(), a.size() * 2);
  backend->upload(*db, b.data(), b.size() * 2);
  auto trials = tuner::make_cublaslt_trials(*backend, lt, {.time = true, .warmup = 1, .min_repetitions = 3});
  for (const auto c_type : {templates::DType::kBF16, templates::DType::kF32}) {
    INFO("C " << templates::to_string(c_type));
    const tuner::GemmDesc g{.trans_b = true, .m = m, .n = n, .k = k, .a = da->address(), .b = db->address(),
                            .c = dc->address(), .lda = k, .ldb = k, .ldc = n, .a_type = templates::DType::kBF16,
                            .b_type = templates::DType::kBF16, .c_type = c_type};
    tuner::GemmSelector selector(*trials, backend->device(), nullptr, {});
    const tuner::GemmAlgo chosen = selector.choose(g);
    CHECK(selector.counts().timed == 1);

    backend->poison(*dc);
    lt.matmul(g, backend->native_stream(), chosen);
    std::vector<float> got(m * n);
    if (c_type == templates::DType::kF32) {
      backend->download(got.data(), *dc, got.size() * 4);
    } else {
      std::vector<std::uint16_t> bits(m * n);
      backend->download(bits.data(), *dc, bits.size() * 2);
      for (std::size_t i = 0; i < bits.size(); ++i) got[i] = templates::bf16_bits_to_float(bits[i]);
    }
    // Exact bf16 products summed in fp32: a bf16 C adds one rounding (2^-9 relative).
    CHECK(error_against_loop(got, af, bf, m, n, k) < (c_type == templates::DType::kF32 ? 1e-5 : 5e-3));
  }
}

TEST_CASE("cuBLASLt trials hold the timing's L2 flush with their operands, from prepare to release",
          "[gpu][cublaslt][gemm]") {
  // So a GEMM chosen beside a training run's buffers finds at prepare(), where the heuristic's first is taken
  // with a warning, that the timing has no memory, not in every candidate's time() (no algorithm chosen).
  test::skip_without_gpu();
  auto backend = tuner::exec::make_cuda_backend();
  auto workspace = backend->allocate(std::size_t{32} << 20, "cuBLASLt workspace");
  tuner::CublasLt lt(workspace->address(), workspace->bytes());
  auto c = backend->allocate(64 * 64 * 4, "c");
  const tuner::GemmDesc g{.trans_b = true, .m = 64, .n = 64, .k = 64, .a = c->address(), .b = c->address(),
                          .c = c->address(), .lda = 64, .ldb = 64, .ldc = 64};
  auto trials = tuner::make_cublaslt_trials(*backend, lt, {.time = true, .warmup = 1, .min_repetitions = 3});
  const auto free_bytes = [&] { return static_cast<std::int64_t>(backend->memory().free_bytes); };
  const std::int64_t before = free_bytes();
  trials->prepare(g);
  const std::int64_t flush = 2 * backend->device().l2_bytes;
  CHECK(before - free_bytes() >= flush);  // the operands' 48 KiB beside it
  trials->time(g, trials->candidates(g, 1).front());
  CHECK(before - free_bytes() >= flush);
  trials->release();
  CHECK(before - free_bytes() < flush / 2);
}

}  // namespace tuner_gemm_select_gpu_test
