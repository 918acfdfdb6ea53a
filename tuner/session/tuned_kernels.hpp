// From the tuned cache to launchable kernels: for each (family, problem) a
// run needs, the config (the cache's exact entry, else its nearest tuned
// shape, else the family default — always checked against the family's space
// and constraints), rendered, compiled in parallel through the binary cache,
// and loaded on an execution backend. The model runtime and the benchmarks
// get their kernels here.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "cache/tuned_cache.hpp"
#include "templates/family.hpp"
#include "tuner/exec/backend.hpp"

namespace ktune::tuner {

/// The cache key of `family` on `problem` for `device`, with this NVRTC.
cache::Key cache_key(const templates::Family& family, const templates::Problem& problem, const DeviceLimits& device);

/// The config a run without a tuned entry takes on `device`: the family's
/// default for the device's architecture (arch_default) where it has one
/// valid there, else its default where that is valid (defaults are chosen
/// valid on sm_80); else the valid point of the space that differs from it in the fewest
/// parameters, then by the fewest steps along their domains, then first in
/// space order. Throws kInvalidInput when no point of the space is valid for
/// the problem on the device.
Config default_on(const templates::Family& family, const templates::Problem& problem, const DeviceLimits& device);

/// A config and where it came from.
struct ChosenConfig {
  Config config;
  cache::Match match = cache::Match::kNone;  ///< kNone: the family default
  std::string source;  ///< "exact", "nearest (distance 1.00, tuned for ...)", "default (...)"
  /// A nearest entry tuned on another GPU of the architecture: that GPU's name (else empty).
  std::string other_gpu;
  /// A deterministic run's: the config chosen as above did not sum in a
  /// fixed order (Family::deterministic), so this is the nearest that does.
  bool made_deterministic = false;
  /// Of those: the config is the fastest deterministic one its tuning
  /// measured (cache::Entry::deterministic), not the nearest.
  bool deterministic_measured = false;
};

/// The config `family` uses for `problem` on `device`; `tuned` may be null
/// (the default). Stale entries the lookup skipped are appended to `warnings`.
/// With `deterministic`, where that config does not give the same bits run
/// after run (Family::deterministic), the tuned entry's deterministic pick
/// (the fastest such config its session measured) where it has one valid
/// here, else the valid one nearest it that does (the fewest parameters
/// changed, then the fewest steps along their domains, then first in space
/// order); kInvalidInput where none does.
ChosenConfig choose_config(const templates::Family& family, const templates::Problem& problem,
                           const DeviceLimits& device, const cache::TunedCache* tuned,
                           std::vector<std::string>* warnings = nullptr, bool deterministic = false);

/// One (family, problem) a run needs.
struct KernelRequest {
  const templates::Family* family = nullptr;
  templates::Problem problem;
};

/// A kernel ready to launch: plan it with the family's typed API and hand the
/// launches to the backend with `module`.
struct TunedKernel {
  const templates::Family* family = nullptr;
  templates::Problem problem;
  ChosenConfig chosen;
  std::shared_ptr<const exec::Module> module;
};

class TunedKernels {
 public:
  /// `tuned` may be null (every kernel at its family default); both must
  /// outlive this object. With `deterministic`, every config is one that
  /// gives the same bits run after run (choose_config).
  TunedKernels(exec::Backend& backend, const cache::TunedCache* tuned, bool deterministic = false);

  /// Chooses, renders, compiles (in parallel, on `threads` workers; 0: the
  /// environment's default) and loads every request not loaded yet. Throws
  /// Error(kCompile) naming the family and problem when one fails to compile.
  void prepare(const std::vector<KernelRequest>& requests, unsigned threads = 0);
  /// The prepared kernel; throws kInvalidInput when it was never prepared.
  const TunedKernel& get(const templates::Family& family, const templates::Problem& problem) const;

  const std::vector<TunedKernel>& kernels() const { return kernels_; }
  const std::vector<std::string>& warnings() const { return warnings_; }
  /// How many prepared kernels came from an exact entry, a nearest one, the default.
  std::size_t count(cache::Match match) const;
  /// How many prepared kernels a deterministic run changed (ChosenConfig::made_deterministic), and of those, how
  /// many to a config their tuning measured (ChosenConfig::deterministic_measured).
  std::size_t made_deterministic() const;
  std::size_t deterministic_measured() const;

 private:
  exec::Backend& backend_;
  const cache::TunedCache* tuned_;
  bool deterministic_ = false;
  std::vector<TunedKernel> kernels_;
  std::vector<std::string> warnings_;
};

}  // namespace ktune::tuner
