// cuBLASLt, loaded at run time (dlopen libcublasLt, like the driver in
// driver.hpp): ktune never links it, so it builds and runs without it. The
// GEMMs of the model runtime on a GPU (the families have no GEMM).
//   CublasLt lt(workspace_address, workspace_bytes);
//   lt.matmul(GemmDesc{...}, stream);   // row-major, fp32 or bf16 operands, batched
//   lt.algorithms(g, 8) / lt.matmul(g, stream, algo)   // compiled mode's
//                                        // timed choice (gemm_select.hpp)
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

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

  friend bool operator==(const GemmDesc&, const GemmDesc&) = default;

  /// Elements each operand spans from its address: its last batch's last
  /// row, whole (the padding between rows included).
  std::int64_t span_a() const;
  std::int64_t span_b() const;
  std::int64_t span_c() const;
};

/// The alignment (bytes, at most 256) every batch's pointer of an operand
/// at `address` has, advanced by `stride` elements: what cuBLASLt's
/// heuristic is told, and part of a chosen algorithm's key.
std::uint32_t gemm_alignment(std::uint64_t address, std::int64_t batch, std::int64_t stride,
                             templates::DType type);

/// One cuBLASLt algorithm: the words of its cublasLtMatmulAlgo_t, which
/// cuBLASLt documents as serialisable for reuse with the same library
/// version, and the configuration attributes read from them (algo_id, tile,
/// stages, splitk, reduction, swizzle, custom, inner_shape, cluster_shape)
/// for people and for checking a stored algorithm against its words.
struct GemmAlgo {
  std::array<std::uint64_t, 8> words{};
  std::map<std::string, std::int64_t> attributes;
  bool operator==(const GemmAlgo& other) const { return words == other.words; }
};

/// "f32" or "bf16" GEMM operand types are accepted; throws kInvalidInput for
/// any other type, or for `tf32` with a bf16 operand (tf32 is an fp32 mode).
void check_gemm_types(const GemmDesc& g);

/// A cuBLASLt handle and its workspace; GEMMs run on the caller's stream
/// with the heuristic's first algorithm (the eager mode's choice) or with a
/// given one (compiled mode's timed choice, gemm_select.hpp).
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
  /// Enqueues `g` with `algo` (one of algorithms(), or one refusal() accepts).
  /// Throws Error(kCuda) when cuBLASLt refuses it.
  void matmul(const GemmDesc& g, std::uint64_t stream, const GemmAlgo& algo);
  /// The heuristic's first `count` algorithms for `g` (at least one), best
  /// first, for the alignment of g's addresses. Throws like matmul.
  std::vector<GemmAlgo> algorithms(const GemmDesc& g, int count);
  /// Empty when `algo` (read back from a file) can run `g` on this device:
  /// its attributes are those its words hold and cublasLtMatmulAlgoCheck
  /// accepts it; else why not.
  std::string refusal(const GemmDesc& g, const GemmAlgo& algo);

  /// Empty when libcublasLt loads, else why not (never throws).
  static std::string unavailable_reason();
  /// "cublasLt <cublasLtGetVersion()>" of the loaded library.
  static std::string version();

 private:
  struct State;
  struct Request;
  void run(const GemmDesc& g, std::uint64_t stream, Request& request);
  std::unique_ptr<State> state_;
};

}  // namespace ktune::tuner
