// Compiled mode's GEMM algorithms, chosen by timing and kept in the tuned
// cache as `gemm` entries (cache/SCHEMA.md):
//   GemmSelector s(trials, device, &cache, store);
//   const GemmAlgo& algo = s.choose(g);   // cache (exact key, checked), else timed now
// For each distinct GEMM (gemm_key: shape, transposes, batch and strides,
// alignment, dtypes, epilogue, GPU) the heuristic's top candidates are
// timed; the fastest is validated against the heuristic's first on fresh
// random operands before it is kept (the next fastest otherwise), and the
// choice is stored. The selection talks to a GemmTrials, so tests drive it
// with a fake engine; CublasLtTrials is the one that runs on a GPU.
#pragma once
#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/device_limits.hpp"
#include "cache/tuned_cache.hpp"
#include "tuner/cuda/cublaslt.hpp"
#include "tuner/run/runner.hpp"

namespace ktune::tuner {
namespace exec {
class Backend;
}

/// Value of the `family` field of GEMM entries.
inline constexpr const char* kGemmFamily = "gemm";

/// The dtype part of a GEMM's key: "f32" (fp32 operands, fp32 compute).
std::string gemm_dtype(const GemmDesc& g);
/// The relative L2 error a timed algorithm may differ from the heuristic's
/// first by: the tolerance of the narrowest operand type (bf16 when any
/// operand is bf16, else tf32 or f32).
double gemm_tolerance(const GemmDesc& g);
/// The cache key of `g` on `device` with the GEMM library `library` (e.g.
/// "cublasLt 130100", stored as the source hash: an algorithm of another
/// library version is stale). The problem key names m, n, k, the
/// transposes, batch, leading dimensions and strides, the operands' address
/// alignment (an algorithm chosen for 16-byte aligned operands may fault on
/// 4-byte aligned ones) and the epilogue (accumulate: beta != 0).
cache::Key gemm_key(const GemmDesc& g, const DeviceLimits& device, const std::string& library);

/// An algorithm as a cache entry's config: {"words": [16 hex digits x 8],
/// "algo_id": ..., "tile": ..., ...}.
nlohmann::json to_json(const GemmAlgo& algo);
/// The algorithm a config holds; nullopt (with why) when it is malformed.
std::optional<GemmAlgo> gemm_algo_from_json(const nlohmann::json& config, std::string& why);

/// What choosing an algorithm needs from a GEMM engine.
class GemmTrials {
 public:
  virtual ~GemmTrials() = default;
  /// The library and its version, e.g. "cublasLt 130100".
  virtual std::string library() const = 0;
  /// Up to `count` algorithms for `g`, the heuristic's order (the first is
  /// the heuristic's choice, the reference).
  virtual std::vector<GemmAlgo> candidates(const GemmDesc& g, int count) = 0;
  /// Empty when `algo` (read back from a cache) runs `g` here, else why not.
  virtual std::string refusal(const GemmDesc& g, const GemmAlgo& algo) = 0;
  /// Makes the operands of the trials' own (never g's) that time() and
  /// error() run `g` on, and holds the memory the timing takes beside them,
  /// before any candidate runs: what fails here (out of memory) is no
  /// candidate's; the selector takes the heuristic's first, untimed, and
  /// warns. release() frees them.
  virtual void prepare(const GemmDesc& g) { (void)g; }
  virtual void release() {}
  /// Times `g` with `algo` on the prepared operands.
  /// Throws tuner Errors when the algorithm fails to run.
  virtual Measurement time(const GemmDesc& g, const GemmAlgo& algo) = 0;
  /// Relative L2 error of `g` run with `algo` against `reference`, on the
  /// prepared operands, the output poisoned first (NaN: infinity) or, where
  /// the GEMM accumulates, written back as it was.
  virtual double error(const GemmDesc& g, const GemmAlgo& algo, const GemmAlgo& reference) = 0;
};

/// The trials on a GPU: cuBLASLt on `backend`'s stream, timed by the
/// backend's harness (CUDA events, warm-up, L2 flushed, median), operands
/// allocated per GEMM with g's alignment. `lt` and `backend` must outlive it.
std::unique_ptr<GemmTrials> make_cublaslt_trials(exec::Backend& backend, CublasLt& lt, RunOptions timing);

struct GemmSelectOptions {
  int candidates = 8;  ///< heuristic's top algorithms timed per GEMM
  /// false: a GEMM the cache holds no algorithm for takes the heuristic's
  /// first, neither timed nor stored (a deterministic run: timings, and so
  /// choices, change from run to run).
  bool time = true;
};

/// How the choices of a run were made.
struct GemmSelectCounts {
  int cached = 0;     ///< read from the tuned cache (exact key, accepted by the engine)
  int timed = 0;      ///< chosen by timing now
  int heuristic = 0;  ///< the heuristic's first, untimed (GemmSelectOptions::time false, or no memory to time)
  int rejected = 0;   ///< fastest candidates that failed validation or failed to run
};

class GemmSelector {
 public:
  /// Where a newly timed choice goes (e.g. CacheFile::put); may be empty.
  using Store = std::function<void(const cache::Entry&)>;
  /// `trials` and `cache` (may be null) must outlive the selector.
  GemmSelector(GemmTrials& trials, DeviceLimits device, const cache::TunedCache* cache, Store store,
               GemmSelectOptions options = {});

  /// The algorithm for `g`: the one chosen before in this process, else the
  /// cache's entry of the exact key when the engine accepts it, else timed
  /// now (and stored), or without timing the heuristic's first. Throws when
  /// no candidate runs.
  const GemmAlgo& choose(const GemmDesc& g);

  const GemmSelectCounts& counts() const { return counts_; }
  /// Stale or refused cache entries and choices that could not be stored,
  /// one line each.
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  std::optional<GemmAlgo> from_cache(const GemmDesc& g, const cache::Key& key);
  GemmAlgo timed(const GemmDesc& g, const cache::Key& key);

  GemmTrials& trials_;
  DeviceLimits device_;
  std::string library_;
  const cache::TunedCache* cache_;
  Store store_;
  GemmSelectOptions options_;
  using Signature = std::pair<std::string, std::array<std::int64_t, 16>>;  // gemm_key's fields
  std::map<Signature, GemmAlgo> chosen_;
  GemmSelectCounts counts_;
  std::vector<std::string> warnings_;
};

}  // namespace ktune::tuner
