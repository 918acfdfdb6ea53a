// cuBLASLt, loaded at run time (dlopen libcublasLt, like the driver in
// driver.hpp): ktune never links it, so it builds and runs without it. The
// GEMMs of the model runtime on a GPU (the families have no GEMM).
//   CublasLt lt(workspace_address, workspace_bytes);
//   lt.matmul(GemmDesc{...}, stream);   // row-major, fp32 or bf16 operands, batched
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "templates/problem.hpp"

namespace ktune::tuner {

/// C (m, n) = alpha op(A) op(B) + beta C on device addresses, row-major,
/// `batch` times with each operand advanced by its stride (elements). op(A)
/// is (m, k): A is stored (m, k) with row stride lda, or (k, m) when trans_a.
/// Operands are fp32 or bf16 (a_type, b_type, c_type), accumulated in fp32;
/// `tf32` runs fp32 operands on the tf32 matrix units (inputs rounded to 10
/// mantissa bits).
struct GemmDesc {
  bool trans_a = false, trans_b = false;
  std::int64_t m = 0, n = 0, k = 0;
  std::uint64_t a = 0, b = 0, c = 0;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  float alpha = 1, beta = 0;
  std::int64_t batch = 1;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  templates::DType a_type = templates::DType::kF32, b_type = templates::DType::kF32, c_type = templates::DType::kF32;
  bool tf32 = false;
};

/// "f32" or "bf16" GEMM operand types are accepted; throws kInvalidInput for
/// any other type, or for `tf32` with a bf16 operand (tf32 is an fp32 mode).
void check_gemm_types(const GemmDesc& g);

/// A cuBLASLt handle and its workspace; GEMMs run on the caller's stream
/// with the heuristic's first algorithm (the eager mode's choice; compiled
/// mode's timed choice is owed).
class CublasLt {
 public:
  /// Throws Error(kNoDevice) with the reason when libcublasLt cannot be loaded.
  /// The workspace (device memory the caller owns) must outlive this object.
  CublasLt(std::uint64_t workspace, std::size_t workspace_bytes);
  ~CublasLt();
  CublasLt(const CublasLt&) = delete;
  CublasLt& operator=(const CublasLt&) = delete;

  /// Enqueues `g` on `stream` (a CUstream). Throws Error(kCuda) when
  /// cuBLASLt has no algorithm for it or refuses it.
  void matmul(const GemmDesc& g, std::uint64_t stream);

  /// Empty when libcublasLt loads, else why not (never throws).
  static std::string unavailable_reason();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ktune::tuner
