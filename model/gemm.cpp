// OpenBLAS GEMMs (see gemm.hpp).
#include "model/gemm.hpp"

#include <cblas.h>

#include <cstring>

namespace ktune::model {

namespace {

CBLAS_TRANSPOSE op(bool trans) { return trans ? CblasTrans : CblasNoTrans; }

void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
          std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  cblas_sgemm(CblasRowMajor, op(ta), op(tb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha, const double* a,
          std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c, std::int64_t ldc) {
  cblas_dgemm(CblasRowMajor, op(ta), op(tb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

template <class T>
void gemm_rowmajor(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
                   std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void round_to_tf32(float* values, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t u;
    std::memcpy(&u, &values[i], sizeof(u));
    if ((u & 0x7f800000u) == 0x7f800000u) continue;  // inf, NaN
    u = (u + 0x1000u) & 0xffffe000u;                 // half an ulp of tf32 added to the magnitude, then truncated
    std::memcpy(&values[i], &u, sizeof(u));
  }
}

void set_gemm_threads(unsigned threads) { openblas_set_num_threads(static_cast<int>(threads)); }

template void gemm_rowmajor<float>(bool, bool, std::int64_t, std::int64_t, std::int64_t, float, const float*,
                                   std::int64_t, const float*, std::int64_t, float, float*, std::int64_t);
template void gemm_rowmajor<double>(bool, bool, std::int64_t, std::int64_t, std::int64_t, double, const double*,
                                    std::int64_t, const double*, std::int64_t, double, double*, std::int64_t);

}  // namespace ktune::model
