// cuBLASLt through dlopen (see cublaslt.hpp). Row-major GEMMs map onto
// cuBLASLt's column-major ones as C^T = op(B)^T op(A)^T: the operands swap
// and each row-major (r, c) matrix is read as a column-major (c, r) one.
#include "tuner/cuda/cublaslt.hpp"

#include <cublasLt.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "base/error.hpp"
#include "tuner/cuda/check.hpp"

namespace ktune::tuner {
namespace {

#define KTUNE_CUBLASLT_FUNCTIONS(X)                                                                            \
  X(cublasLtCreate)                                                                                            \
  X(cublasLtDestroy) X(cublasLtGetVersion) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy)            \
      X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)           \
          X(cublasLtMatrixLayoutSetAttribute) X(cublasLtMatmulPreferenceCreate)                                \
              X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute)                       \
                  X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul) X(cublasLtMatmulAlgoCheck)          \
                      X(cublasLtMatmulAlgoConfigGetAttribute)

struct Library {
#define KTUNE_CUBLASLT_FN(name) decltype(&::name) name = nullptr;
  KTUNE_CUBLASLT_FUNCTIONS(KTUNE_CUBLASLT_FN)
#undef KTUNE_CUBLASLT_FN
  std::string failure;  // empty when usable
};

const Library& library() {
  static const Library lib = [] {
    Library l;
    void* handle = nullptr;
    for (const char* name : {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"})
      if ((handle = ::dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    if (!handle) {
      l.failure = "cuBLASLt (libcublasLt.so.13 or .12) is not installed";
      return l;
    }
    std::string missing;
#define KTUNE_CUBLASLT_FN(name)                                                  \
  l.name = reinterpret_cast<decltype(l.name)>(::dlsym(handle, #name));           \
  if (!l.name) missing += std::string(missing.empty() ? "" : ", ") + #name;
    KTUNE_CUBLASLT_FUNCTIONS(KTUNE_CUBLASLT_FN)
#undef KTUNE_CUBLASLT_FN
    if (!missing.empty()) l.failure = "libcublasLt lacks " + missing;
    return l;
  }();
  return lib;
}

cudaDataType_t cuda_type(templates::DType type) {
  return type == templates::DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
}

// A column-major layout owned for one call.
struct Layout {
  cublasLtMatrixLayout_t layout = nullptr;
  Layout(templates::DType type, std::int64_t rows, std::int64_t cols, std::int64_t ld, std::int64_t batch,
         std::int64_t stride) {
    const Library& lib = library();
    KT_CHECK_CUBLAS(lib.cublasLtMatrixLayoutCreate(&layout, cuda_type(type), static_cast<std::uint64_t>(rows),
                                                   static_cast<std::uint64_t>(cols), ld));
    if (batch > 1) {
      const auto count = static_cast<std::int32_t>(batch);
      KT_CHECK_CUBLAS(lib.cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                           sizeof(count)));
      KT_CHECK_CUBLAS(lib.cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                           &stride, sizeof(stride)));
    }
  }
  ~Layout() {
    if (layout) library().cublasLtMatrixLayoutDestroy(layout);
  }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
};

// The alignment (bytes, at most 256) every batch's pointer of an operand has:
// cuBLASLt's heuristic assumes 256 unless told, and an algorithm chosen for
// that would fault on a tensor at a smaller offset in the run's allocation.
std::uint32_t alignment(std::uint64_t address, std::int64_t batch, std::int64_t stride_elements,
                        templates::DType type) {
  std::uint64_t bits = address | 256;
  if (batch > 1) bits |= static_cast<std::uint64_t>(stride_elements) * templates::size_of(type);
  return static_cast<std::uint32_t>(bits & (~bits + 1));  // lowest set bit
}

// The configuration attributes a GemmAlgo names, with their sizes in bytes.
struct AlgoAttribute {
  const char* name;
  cublasLtMatmulAlgoConfigAttributes_t attribute;
  std::size_t bytes;
};
constexpr AlgoAttribute kAlgoAttributes[] = {
    {"algo_id", CUBLASLT_ALGO_CONFIG_ID, 4},
    {"tile", CUBLASLT_ALGO_CONFIG_TILE_ID, 4},
    {"splitk", CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 4},
    {"reduction", CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, 4},
    {"swizzle", CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, 4},
    {"custom", CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, 4},
    {"stages", CUBLASLT_ALGO_CONFIG_STAGES_ID, 4},
    {"inner_shape", CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, 2},
    {"cluster_shape", CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, 2},
};

GemmAlgo to_algo(const cublasLtMatmulAlgo_t& algo) {
  GemmAlgo out;
  std::memcpy(out.words.data(), algo.data, sizeof(algo.data));
  for (const auto& a : kAlgoAttributes) {
    std::int32_t value = 0;  // every attribute is 2 or 4 bytes, little-endian, signed or small
    std::size_t written = 0;
    if (library().cublasLtMatmulAlgoConfigGetAttribute(&algo, a.attribute, &value, a.bytes, &written) ==
        CUBLAS_STATUS_SUCCESS)
      out.attributes[a.name] = a.bytes == 2 ? static_cast<std::uint16_t>(value) : value;
  }
  return out;
}

cublasLtMatmulAlgo_t from_algo(const GemmAlgo& algo) {
  cublasLtMatmulAlgo_t out{};
  static_assert(sizeof(out.data) == sizeof(algo.words), "cublasLtMatmulAlgo_t holds 8 words");
  std::memcpy(out.data, algo.words.data(), sizeof(out.data));
  return out;
}

}  // namespace

void check_gemm_types(const GemmDesc& g) {
  for (const templates::DType t : {g.a_type, g.b_type, g.c_type})
    KTUNE_REQUIRE(t == templates::DType::kF32 || t == templates::DType::kBF16,
                  fmt::format("GEMM operand type {}; accepted: f32, bf16", templates::to_string(t)));
  KTUNE_REQUIRE(!g.tf32 || (g.a_type == templates::DType::kF32 && g.b_type == templates::DType::kF32),
                "a tf32 GEMM takes fp32 operands (tf32 is how the matrix units read them)");
}

std::uint32_t gemm_alignment(std::uint64_t address, std::int64_t batch, std::int64_t stride,
                             templates::DType type) {
  return alignment(address, batch, stride, type);
}

std::int64_t GemmDesc::span_a() const {
  return (batch - 1) * stride_a + ((trans_a ? k : m) - 1) * lda + (trans_a ? m : k);
}
std::int64_t GemmDesc::span_b() const {
  return (batch - 1) * stride_b + ((trans_b ? n : k) - 1) * ldb + (trans_b ? k : n);
}
std::int64_t GemmDesc::span_c() const { return (batch - 1) * stride_c + (m - 1) * ldc + n; }

// What one pass over a GEMM's descriptors does: run it (with the
// heuristic's first algorithm, or `algo`), list candidates, or check `algo`.
struct CublasLt::Request {
  const GemmAlgo* algo = nullptr;     // run or check this one
  int candidates = 0;                 // > 0: list this many, run nothing
  std::vector<GemmAlgo> found;
  bool check_only = false;            // check `algo`, run nothing
  std::string refusal;
};

struct CublasLt::State {
  cublasLtHandle_t handle = nullptr;
  std::uint64_t workspace = 0;
  std::size_t workspace_bytes = 0;
};

std::string CublasLt::unavailable_reason() { return library().failure; }

CublasLt::CublasLt(std::uint64_t workspace, std::size_t workspace_bytes) : state_(std::make_unique<State>()) {
  const Library& lib = library();
  if (!lib.failure.empty()) throw Error(ErrorKind::kNoDevice, "cuBLASLt: " + lib.failure);
  KT_CHECK_CUBLAS(lib.cublasLtCreate(&state_->handle));
  state_->workspace = workspace;
  state_->workspace_bytes = workspace_bytes;
}

CublasLt::~CublasLt() {
  if (state_ && state_->handle) library().cublasLtDestroy(state_->handle);
}

std::string CublasLt::version() {
  const Library& lib = library();
  return lib.failure.empty() ? fmt::format("cublasLt {}", lib.cublasLtGetVersion()) : std::string("cublasLt none");
}

void CublasLt::matmul(const GemmDesc& g, std::uint64_t stream) {
  Request request;
  run(g, stream, request);
}

void CublasLt::matmul(const GemmDesc& g, std::uint64_t stream, const GemmAlgo& algo) {
  Request request;
  request.algo = &algo;
  run(g, stream, request);
}

std::vector<GemmAlgo> CublasLt::algorithms(const GemmDesc& g, int count) {
  Request request;
  request.candidates = std::max(1, count);
  run(g, 0, request);
  return request.found;
}

std::string CublasLt::refusal(const GemmDesc& g, const GemmAlgo& algo) {
  Request request;
  request.algo = &algo;
  request.check_only = true;
  run(g, 0, request);
  return request.refusal;
}

void CublasLt::run(const GemmDesc& g, std::uint64_t stream, Request& request) {
  const Library& lib = library();
  check_gemm_types(g);
  // Column-major view: D' (n, m) = op(B') op(A'), A' = B, B' = A. fp32
  // accumulation and scalars whatever the operands.
  cublasLtMatmulDesc_t desc = nullptr;
  KT_CHECK_CUBLAS(lib.cublasLtMatmulDescCreate(&desc, g.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                               CUDA_R_32F));
  struct DescOwner {
    cublasLtMatmulDesc_t d;
    ~DescOwner() { library().cublasLtMatmulDescDestroy(d); }
  } desc_owner{desc};
  const cublasOperation_t op_a = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  KT_CHECK_CUBLAS(lib.cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  KT_CHECK_CUBLAS(lib.cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  // B row-major (k, n) is column-major (n, k); transposed it is stored (n, k) row-major: (k, n).
  const Layout a(g.b_type, g.trans_b ? g.k : g.n, g.trans_b ? g.n : g.k, g.ldb, g.batch, g.stride_b);
  const Layout b(g.a_type, g.trans_a ? g.m : g.k, g.trans_a ? g.k : g.m, g.lda, g.batch, g.stride_a);
  const Layout c(g.c_type, g.n, g.m, g.ldc, g.batch, g.stride_c);

  cublasLtMatmulPreference_t pref = nullptr;
  KT_CHECK_CUBLAS(lib.cublasLtMatmulPreferenceCreate(&pref));
  struct PrefOwner {
    cublasLtMatmulPreference_t p;
    ~PrefOwner() { library().cublasLtMatmulPreferenceDestroy(p); }
  } pref_owner{pref};
  const std::uint64_t ws = state_->workspace_bytes;
  KT_CHECK_CUBLAS(lib.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                          sizeof(ws)));
  // A' is B and B' is A (the column-major view); C and D are one buffer.
  const std::uint32_t align_a = alignment(g.b, g.batch, g.stride_b, g.b_type),
                      align_b = alignment(g.a, g.batch, g.stride_a, g.a_type),
                      align_c = alignment(g.c, g.batch, g.stride_c, g.c_type);
  for (const auto& [attribute, value] : {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a},
                                         std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b},
                                         std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c},
                                         std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c}})
    KT_CHECK_CUBLAS(lib.cublasLtMatmulPreferenceSetAttribute(pref, attribute, value, sizeof(*value)));
  // The algorithm: the given one, else the heuristic's first.
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<std::size_t>(std::max(1, request.candidates)));
  cublasLtMatmulHeuristicResult_t& result = results[0];
  if (request.algo) {
    result.algo = from_algo(*request.algo);
    if (request.check_only) {  // an algorithm read back from a file, checked once before use
      if (to_algo(result.algo).attributes != request.algo->attributes) {
        request.refusal = "its attributes are not those its words hold";
        return;
      }
      const cublasStatus_t status = lib.cublasLtMatmulAlgoCheck(state_->handle, desc, a.layout, b.layout,
                                                                c.layout, c.layout, &result.algo, &result);
      if (status != CUBLAS_STATUS_SUCCESS)
        request.refusal = fmt::format("cublasLtMatmulAlgoCheck returns status {}", static_cast<int>(status));
      else if (result.workspaceSize > state_->workspace_bytes)
        request.refusal = fmt::format("it needs {} bytes of workspace; {} are reserved", result.workspaceSize,
                                      state_->workspace_bytes);
      return;
    }
  } else {
    int found = 0;
    KT_CHECK_CUBLAS(lib.cublasLtMatmulAlgoGetHeuristic(state_->handle, desc, a.layout, b.layout, c.layout, c.layout,
                                                       pref, static_cast<int>(results.size()), results.data(), &found));
    if (found < 1)
      throw Error(ErrorKind::kCuda,
                  fmt::format("cuBLASLt has no algorithm for the GEMM m={} n={} k={} batch={} ({} x {} -> {}{})", g.m,
                              g.n, g.k, g.batch, templates::to_string(g.a_type), templates::to_string(g.b_type),
                              templates::to_string(g.c_type), g.tf32 ? ", tf32" : ""));
    if (request.candidates > 0) {
      for (int i = 0; i < found; ++i)
        if (results[i].state == CUBLAS_STATUS_SUCCESS) request.found.push_back(to_algo(results[i].algo));
      return;
    }
  }
  KT_CHECK_CUBLAS(lib.cublasLtMatmul(state_->handle, desc, &g.alpha, reinterpret_cast<const void*>(g.b), a.layout,
                                     reinterpret_cast<const void*>(g.a), b.layout, &g.beta,
                                     reinterpret_cast<const void*>(g.c), c.layout, reinterpret_cast<void*>(g.c),
                                     c.layout, &result.algo, reinterpret_cast<void*>(state_->workspace),
                                     state_->workspace_bytes, reinterpret_cast<cudaStream_t>(stream)));
}

}  // namespace ktune::tuner
