// The end-to-end training-step benchmark of the seed reports (002, 004):
// forward, backward and optimizer times over trials after warm-up steps, on
// random tokens, for one model size, context length and batch, on any
// backend (model/runtime.hpp). Each phase is timed between two marks of the
// runtime: CUDA events on the backend's stream on a GPU, the host clock
// after waiting on cpu and emu. On a GPU the device memory in use is
// measured after each step (cuMemGetInfo) beside the memory plan's peak:
// the whole device's, so it is this run's only while no other process
// allocates or frees memory on the GPU meanwhile.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config.hpp"
#include "model/memory_plan.hpp"
#include "model/ops/device_ops.hpp"
#include "model/ops/profiled_ops.hpp"
#include "model/runtime.hpp"

namespace ktune::model {

/// Which passes a trial runs.
enum class E2ePasses {
  kForward,          ///< forward only (002's forward_only = True)
  kForwardBackward,  ///< forward + backward (004's columns)
  kStep,             ///< forward + backward + AdamW
};

/// What the model of a run of `passes` is allocated for: AdamW's state for
/// a step only.
inline Allocation e2e_allocation(E2ePasses passes) {
  return passes == E2ePasses::kStep               ? Allocation::kTrain
         : passes == E2ePasses::kForwardBackward ? Allocation::kGradients
                                                 : Allocation::kForwardOnly;
}

struct E2eOptions {
  BackendOptions backend;  ///< where and how the model runs
  ModelConfig model;
  RunShape shape{4, 128};
  std::int64_t warmup = 1;
  std::int64_t trials = 10;
  E2ePasses passes = E2ePasses::kForwardBackward;
  /// The optimizer step's clip-by-norm threshold; 0 (off) by default, as the
  /// PyTorch peer's optimizer step (bench/peers/torch_e2e.py) does not clip.
  float clip_norm = 0.0f;
  std::string weights;     ///< safetensors to start from (empty: the seed-0 initialisation)
  std::string save_batch;  ///< when set: the starting weights and the batch (I32 `tokens`, `targets`,
                           ///< (batch, context)) written here as safetensors, for a peer to run the same step
  /// After the timed trials, as many steps again with every op timed
  /// (model/ops/profiled_ops.hpp); the trials' times stay unprofiled.
  bool profile = false;
  /// Called after each step run (warm-up, trial, profiled), with how many of
  /// how many: progress for a caller (outside the timed spans).
  std::function<void(std::int64_t done, std::int64_t steps)> on_step;
  /// Asked after each step run: true ends the run there (a stop signal), its
  /// trials so far the result (E2eResult::trials_planned says how many were asked).
  std::function<bool()> should_stop;
};

/// Mean and sample standard deviation (n-1) of one phase, in milliseconds
/// (the seeds' columns), and the median, which one slow trial does not move.
struct PhaseStats {
  double mean_ms = 0;
  double std_ms = 0;
  double median_ms = 0;
  bool measured = false;
  std::vector<double> samples_ms;  ///< every trial, in order: the statistics can be checked from them
};
/// The statistics of a phase's trial times (ms); not measured when empty.
PhaseStats phase_stats(std::vector<double> trials_ms);

struct E2eResult {
  E2eOptions options;  ///< as asked, but `trials`: the trials measured (fewer where should_stop ended the run)
  std::int64_t trials_planned = 0;  ///< the trials asked for
  std::int64_t profile_steps = 0;   ///< with options.profile: the profiled steps run
  /// Every trial asked for measured (and profiled, with options.profile).
  bool complete() const {
    return options.trials == trials_planned && (!options.profile || profile_steps == trials_planned);
  }
  PhaseStats forward, backward, forward_backward, optimizer, step;
  MemoryPlan plan;
  double loss = 0;  ///< of the first forward, on the starting weights
  std::int64_t allocated_bytes = 0;
  std::int64_t plan_peak_bytes = 0;               ///< the memory plan's peak for the passes run
  std::optional<std::int64_t> device_peak_bytes;  ///< measured on a GPU: most device memory in use after a step
  std::string clock;   ///< what the phases were timed with
  std::string driver;  ///< the CUDA driver API version (cuDriverGetVersion: "13000"), empty without a GPU
  std::string nvidia_driver;  ///< the NVIDIA driver's release ("580.159.04"), empty without a GPU or where unread
  std::vector<std::string> warnings;  ///< stale or refused cache entries
  std::string device;  ///< CPU model name and threads, or the GPU / emulated arch
  std::string kernels; ///< where the device kernels' configs came from (empty on cpu)
  std::vector<Runtime::KernelChoice> kernel_choices;  ///< the same, kernel by kernel
  std::optional<LaunchCount> launches;  ///< what one timed step (its passes) launched; device backends
  std::string date;    ///< UTC, ISO 8601
  std::vector<OpTimes> profile;  ///< with options.profile: each op's times over the profiled steps
};

/// A phase's profiled time by kind of op, the sums of its ops' medians (ms a
/// step): GEMMs; attention (flash attention's products and softmax in one
/// kernel, or the materialised GEMMs and softmax); and the rest (norms, RoPE,
/// SwiGLU, loss, embedding, AdamW). Seed 003's reading of its profile.
struct PhaseKinds {
  std::string phase;  ///< forward | backward | optimizer | all
  double gemm_ms = 0, attention_ms = 0, rest_ms = 0;
  double total_ms() const { return gemm_ms + attention_ms + rest_ms; }
};
/// The phases of `profile` present, in the order forward, backward,
/// optimizer, then "all": their sums.
std::vector<PhaseKinds> phase_kinds(const std::vector<OpTimes>& profile);

/// Runs the benchmark; throws kInvalidInput for an unknown backend or
/// non-positive trials.
E2eResult bench_e2e(const E2eOptions& options);

nlohmann::json to_json(const E2eResult& r);

/// FLOPs of one forward and backward over the run's batch, as
/// ModelConfig::train_flops_per_token counts them (PaLM's count).
double train_flops(const E2eResult& r);

/// "AMD EPYC ..." from /proc/cpuinfo, "unknown CPU" elsewhere.
std::string cpu_name();

}  // namespace ktune::model
