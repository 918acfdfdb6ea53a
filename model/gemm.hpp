// GEMMs through OpenBLAS (the only op of the cpu backend without a kernel
// family: cuBLASLt plays that part on the GPU). All matrices row-major.
#pragma once
#include <cstdint>

namespace ktune::model {

/// C (m, n) = alpha op(A) op(B) + beta C; op(A) is (m, k): A is stored (m, k)
/// with row stride lda, or (k, m) when trans_a; likewise B (k, n) or (n, k).
template <class T>
void gemm_rowmajor(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
                   std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc);

/// Rounds each fp32 value to the nearest tf32 (10 mantissa bits, ties away
/// from zero: cvt.rna.tf32.f32, as the tf32 matrix units read a GEMM's
/// inputs); inf and NaN unchanged. What a host GEMM does to its inputs to
/// model a tf32 GEMM's numerics.
void round_to_tf32(float* values, std::int64_t n);

/// Threads OpenBLAS uses for every GEMM of this process.
void set_gemm_threads(unsigned threads);

}  // namespace ktune::model
