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
#include "tuner/exec/backend.hpp"

using namespace ktune;

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
  double num = 0, den = 0;
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double want = 0;
      for (std::int64_t p = 0; p < k; ++p) want += static_cast<double>(a[i * k + p]) * b[j * k + p];
      num += (got[i * n + j] - want) * (got[i * n + j] - want);
      den += want * want;
    }
  CHECK(std::sqrt(num / den) < 1e-5);

  // Words that do not match their attributes are refused before they run.
  tuner::GemmAlgo tampered = again;
  tampered.attributes["tile"] += 1;
  CHECK_FALSE(lt.refusal(g, tampered).empty());
}
