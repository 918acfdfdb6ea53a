// OpenBLAS GEMMs of the linear layers (see gemm.hpp).
#include "model/gemm.hpp"

#include <cblas.h>

namespace ktune::model {

namespace {

inline void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, std::int64_t m, std::int64_t n, std::int64_t k,
                 const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                 std::int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

inline void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, std::int64_t m, std::int64_t n, std::int64_t k,
                 const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c,
                 std::int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

template <class T>
void linear_forward(const T* x, const T* w, T* y, std::int64_t n, std::int64_t in, std::int64_t out, T beta) {
  gemm(CblasNoTrans, CblasTrans, n, out, in, x, in, w, in, beta, y, out);
}

template <class T>
void linear_backward_input(const T* dy, const T* w, T* dx, std::int64_t n, std::int64_t in, std::int64_t out,
                           T beta) {
  gemm(CblasNoTrans, CblasNoTrans, n, in, out, dy, out, w, in, beta, dx, in);
}

template <class T>
void linear_backward_weight(const T* dy, const T* x, T* dw, std::int64_t n, std::int64_t in, std::int64_t out,
                            T beta) {
  gemm(CblasTrans, CblasNoTrans, out, in, n, dy, out, x, in, beta, dw, in);
}

void set_gemm_threads(unsigned threads) { openblas_set_num_threads(static_cast<int>(threads)); }

template void linear_forward<float>(const float*, const float*, float*, std::int64_t, std::int64_t, std::int64_t,
                                    float);
template void linear_forward<double>(const double*, const double*, double*, std::int64_t, std::int64_t,
                                     std::int64_t, double);
template void linear_backward_input<float>(const float*, const float*, float*, std::int64_t, std::int64_t,
                                           std::int64_t, float);
template void linear_backward_input<double>(const double*, const double*, double*, std::int64_t, std::int64_t,
                                            std::int64_t, double);
template void linear_backward_weight<float>(const float*, const float*, float*, std::int64_t, std::int64_t,
                                            std::int64_t, float);
template void linear_backward_weight<double>(const double*, const double*, double*, std::int64_t, std::int64_t,
                                             std::int64_t, double);

}  // namespace ktune::model
