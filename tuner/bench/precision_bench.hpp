// The mixed-precision accumulation of seeds 003 and 004: `count` additions
// of `value` to a sum that starts at 0, with the sum in one dtype and the
// addend in another, run as one kernel thread on a backend (the GPU's
// conversions and fp32 adds, or the emulation's). As PyTorch's `s += x`
// loop, the addend is rounded to its dtype once and each addition is done in
// fp32, then rounded to the sum's dtype. The error splits into what the
// addend's rounding costs (count x the addend as stored, against count x
// value) and what the sum's roundings cost (the sum against count x the
// addend as stored): seed 004's reading, that fp16 cannot hold 0.01, is the
// first; an fp16 or bf16 sum that stops growing is the second, and why the
// runtime's bf16 mixed precision sums in fp32 (GEMM accumulators, norms,
// softmax, loss, AdamW).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tuner/exec/backend.hpp"

namespace ktune::tuner {

struct PrecisionRow {
  std::string sum_dtype, addend_dtype;  ///< "f32", "f16" or "bf16"
  double addend = 0;  ///< the addend as its dtype holds it
  double sum = 0;     ///< the kernel's sum of `count` addends
};

struct PrecisionReport {
  std::string device;
  int driver_version = 0;
  std::string date;
  std::int64_t count = 0;
  double value = 0;  ///< as given; the kernel takes it rounded to fp32
  std::vector<PrecisionRow> rows;
  std::string markdown() const;
  nlohmann::json to_json() const;
};

/// The sum and addend dtypes benchmarked, in the table's order: the seeds'
/// (f32 + f32, f16 + f16, f32 + f16), then bf16's two.
const std::vector<std::pair<std::string, std::string>>& precision_cases();

/// The kernels of precision_cases(), in order: one source, compiled by NVRTC
/// for a GPU and by the host compiler for the emulation.
templates::Rendered precision_source();

/// Runs every case of precision_cases() on `backend`. Throws kInvalidInput
/// for a count outside 1..1e9 or a value that is not finite in fp32.
PrecisionReport run_precision_bench(exec::Backend& backend, std::int64_t count, double value);

}  // namespace ktune::tuner
