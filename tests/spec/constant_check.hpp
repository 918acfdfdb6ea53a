// A kernel spec with a buffer copied into a __constant__ variable before each
// launch (Kernel Tuner's cmem_args), run on a backend (`ktune run --backend
// B`): the kernel reads the filter from constant memory, its reference from
// the same buffer passed as an argument, so a copy not made (a filter of
// zeros, or stale) fails the check; a copy larger than the variable, a
// variable the sources lack and an output in constant memory are named.
// Shared by the emu and gpu tests.
#pragma once
#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "support.hpp"

namespace ktune::test {

/// Writes conv.cu into `dir` and returns its spec: a 17-tap filter copied into d_filter.
inline nlohmann::json constant_spec(const std::filesystem::path& dir) {
  std::ofstream(dir / "conv.cu") << R"cu(
__constant__ float d_filter[64];
template <int BLOCK>
__global__ void conv(float* out, const float* in, const float* /*filter: d_filter's*/, int n, int taps) {
  const int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i >= n) return;
  float sum = 0.0f;
  for (int t = 0; t < taps; ++t) sum += in[i + t] * d_filter[t];
  out[i] = sum;
}
__global__ void conv_reference(float* out, const float* in, const float* filter, int n, int taps) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    float sum = 0.0f;
    for (int t = 0; t < taps; ++t) sum += in[i + t] * filter[t];
    out[i] = sum;
  }
}
)cu";
  return nlohmann::json::parse(R"json({"name": "conv", "source": "conv.cu", "kernel": "conv<{block}>",
    "problem": {"n": 1003, "taps": 17}, "tunables": {"block": [32, 64, 128]},
    "grid": "ceil_div(n, block)", "block": "block",
    "buffers": [{"name": "out", "count": "n", "role": "output"}, {"name": "in", "count": "n + taps - 1"},
                {"name": "filter", "count": "taps", "constant": "d_filter"}],
    "args": ["out", "in", "filter", {"type": "i32", "value": "n"}, {"type": "i32", "value": "taps"}],
    "reference": {"kernel": "conv_reference", "grid": 1, "block": 64}})json");
}

inline void check_constant_copy(const std::string& backend, const std::string& folder) {
  const auto dir = scratch_dir(folder);
  nlohmann::json j = constant_spec(dir);
  const auto write_spec = [&](const std::string& name) {
    std::ofstream(dir / name) << j.dump();
    return (dir / name).string();
  };
  const std::string spec = write_spec("conv.json");
  std::string out;
  const std::string run = ktune_exe().string() + " run --backend " + backend + " --spec ";
  CHECK(run_command(run + spec + " --config '{\"block\":64}' 2>&1", &out) == 0);
  CHECK_THAT(out, Catch::Contains("PASS"));
  // Passed by no argument: the kernel reads it from constant memory alone.
  j["args"] = nlohmann::json::parse(R"(["out", "in", "in", {"type": "i32", "value": "n"},
                                       {"type": "i32", "value": "taps"}])");
  CHECK(run_command(ktune_exe().string() + " render --space --spec " + write_spec("unpassed.json") + " 2>&1",
                    &out) == 0);
  // More than the variable holds, named before the launch.
  j["problem"]["taps"] = 65;
  CHECK(run_command(run + write_spec("large.json") + " 2>&1", &out) != 0);
  CHECK_THAT(out, Catch::Contains("260 bytes of buffer 'filter' of large.json copied into __constant__ 'd_filter', "
                                  "which holds 256"));
  j["problem"]["taps"] = 17;
  // A variable the sources do not declare, and an output in constant memory, are refused as the spec is read.
  j["buffers"][2]["constant"] = "d_filters";
  CHECK(run_command(ktune_exe().string() + " render --space --spec " + write_spec("missing.json") + " 2>&1",
                    &out) == 2);
  CHECK_THAT(out, Catch::Contains("buffer 'filter': no __constant__ 'd_filters' in its sources"));
  j["buffers"][2]["constant"] = "d_filter";
  j["buffers"][0]["constant"] = "d_filter";
  CHECK(run_command(ktune_exe().string() + " render --space --spec " + write_spec("output.json") + " 2>&1",
                    &out) == 2);
  CHECK_THAT(out, Catch::Contains("buffer 'out': a buffer copied into __constant__ 'd_filter' must be an input"));
  j["buffers"][0].erase("constant");
  j["buffers"][1]["constant"] = "d_filter";
  CHECK(run_command(ktune_exe().string() + " render --space --spec " + write_spec("twice.json") + " 2>&1",
                    &out) == 2);
  CHECK_THAT(out, Catch::Contains("buffer 'filter': buffer 'in' is copied into __constant__ 'd_filter' already"));
}

}  // namespace ktune::test
