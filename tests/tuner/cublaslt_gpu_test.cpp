// cuBLASLt through dlopen (tuner/cuda/cublaslt.hpp) against a plain loop:
// row-major GEMMs with every transpose, padded row strides, batches (one
// operand shared by every batch, its batch stride 0, as compiled mode's
// batched projections read theirs), and beta = 1 accumulating into C.
// Skipped without a device.
#include "tuner/cuda/cublaslt.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "support.hpp"
#include "tuner/exec/backend.hpp"

namespace tuner_cublaslt_gpu_test {

using namespace ktune;

TEST_CASE("cuBLASLt: row-major fp32 GEMMs with transposes, strides and batches match a loop", "[gpu][cublaslt]") {
  test::skip_without_gpu();
  auto backend = tuner::exec::make_cuda_backend();
  auto workspace = backend->allocate(std::size_t{4} << 20, "cuBLASLt workspace");
  tuner::CublasLt lt(workspace->address(), workspace->bytes());
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  const std::int64_t m = 37, n = 29, k = 53, batch = 3, pad = 3;
  for (const bool ta : {false, true})
    for (const bool tb : {false, true})
      for (const float beta : {0.0f, 1.0f})
        for (const char shared : {'-', 'a', 'b'}) {  // '-': none; else the operand every batch reads
          INFO("trans_a " << ta << " trans_b " << tb << " beta " << beta << " shared " << shared);
          const std::int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
          const std::int64_t sa = shared == 'a' ? 0 : (ta ? k : m) * lda;
          const std::int64_t sb = shared == 'b' ? 0 : (tb ? n : k) * ldb, sc = m * ldc;
          std::vector<float> a(batch * (ta ? k : m) * lda), b(batch * (tb ? n : k) * ldb), c(batch * sc);
          for (auto* v : {&a, &b, &c})
            for (auto& x : *v) x = u(rng);
          auto da = backend->allocate(a.size() * 4, "a"), db = backend->allocate(b.size() * 4, "b"),
               dc = backend->allocate(c.size() * 4, "c");
          backend->upload(*da, a.data(), a.size() * 4);
          backend->upload(*db, b.data(), b.size() * 4);
          backend->upload(*dc, c.data(), c.size() * 4);
          lt.matmul({.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .a = da->address(), .b = db->address(),
                     .c = dc->address(), .lda = lda, .ldb = ldb, .ldc = ldc, .alpha = 1.0f, .beta = beta,
                     .batch = batch, .stride_a = sa, .stride_b = sb, .stride_c = sc},
                    backend->native_stream());
          std::vector<float> got(c.size());
          backend->download(got.data(), *dc, got.size() * 4);
          double num = 0, den = 0;
          for (std::int64_t bi = 0; bi < batch; ++bi)
            for (std::int64_t i = 0; i < m; ++i)
              for (std::int64_t j = 0; j < n; ++j) {
                double want = beta * c[bi * sc + i * ldc + j];
                for (std::int64_t p = 0; p < k; ++p)
                  want += static_cast<double>(a[bi * sa + (ta ? p * lda + i : i * lda + p)]) *
                          b[bi * sb + (tb ? j * ldb + p : p * ldb + j)];
                const double d = got[bi * sc + i * ldc + j] - want;
                num += d * d;
                den += want * want;
              }
          CHECK(std::sqrt(num / den) < 1e-5);
          // The padding between rows is never written.
          CHECK(got[ldc - 1] == c[ldc - 1]);
        }
}

}  // namespace tuner_cublaslt_gpu_test
