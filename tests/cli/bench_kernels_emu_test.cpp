// `ktune bench ops` and `bench adam` with --backend emu: the kernel
// benchmarks run end to end without a GPU, every output checked against the
// reference, times labelled as the emulation's, nothing divided by a copy
// bandwidth the emulation does not have.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support.hpp"

namespace cli_bench_kernels_emu_test {

using ktune::test::ktune_exe;
using ktune::test::run_command;

nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

TEST_CASE("CLI: bench ops --backend emu runs every decomposed op of the tiny model, eager beside fused",
          "[cli][emu]") {
  const auto dir = ktune::test::scratch_dir("bench_ops_emu");
  std::string out;
  REQUIRE(run_command(ktune_exe().string() + " bench ops --backend emu --model tiny --ctx 9 --batch 2 --json-out " +
                          (dir / "ops.json").string(),
                      &out) == 0);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("no copy bandwidth"));
  CHECK_THAT(out, Catch::Contains("not a GPU measurement"));
  CHECK_THAT(out, Catch::Contains("| tiny | 9 | rmsnorm_bwd | bf16;dim=64;rows=18 |"));
  CHECK_THAT(out, !Catch::Contains("shapes at target"));  // no bandwidth, no target
  const auto j = read_json(dir / "ops.json");
  CHECK(j["copy_bandwidth_gbs"].is_null());  // not measured, as the table's "-" says
  CHECK(j["cuda_driver_api_version"].is_null());  // cuDriverGetVersion's API version, not the driver's release
  CHECK(j["nvidia_driver"].is_null());
  CHECK_FALSE(j.contains("driver_version"));
  CHECK_THAT(out, Catch::Contains("; no driver (emulated); "));  // not "driver 0"
  CHECK(j["rows"].size() == 14);  // every op with an eager decomposition
  for (const auto& row : j["rows"]) {
    CHECK(row["fused_ms"].get<double>() > 0);
    CHECK(row["eager_launches"].get<int>() >= 1);
    CHECK(row["fused_samples_ms"].size() >= 1);
    CHECK(row["eager_samples_ms"].size() >= 1);
    CHECK(row["fused_fraction_of_copy"].is_null());
    CHECK(row["fused_gbs"].is_null());  // a host's wall time is no GPU's GB/s
    CHECK(row["eager_gbs"].is_null());
  }
  CHECK_THAT(out, Catch::Contains(" (2) | - | - | "));  // rmsnorm_bwd's eager GB/s and % copy
  // No floor without a copy bandwidth: an empty launch's host time is none for the rows' host times.
  for (const auto& row : j["rows"]) CHECK(row["floor_ms"].is_null());
  CHECK_THAT(out, Catch::Contains(" | - | - | {") && !Catch::Contains("x | {"));  // floor, fused / floor: "-"
  CHECK_THAT(out, Catch::Contains("  tiny ctx 9 rmsnorm_bwd: eager ") && !Catch::Contains(", floor "));  // progress
  // The method line says how the rows were timed, then the empty launch.
  CHECK_THAT(out, Catch::Contains("\nhost emulation wall time of each row's fused launches (its eager chain's timed "
                                  "apart the same way) (") &&
                      Catch::Contains("; the floor's empty launch: host emulation wall time of empty launch ("));
  // Without --model and --ctx the emulation takes the tiny model at 16 tokens, not the GPU's sizes; those
  // asked for are refused in one line.
  REQUIRE(run_command(ktune_exe().string() + " bench ops --backend emu --families swiglu_fwd", &out) == 0);
  CHECK_THAT(out, Catch::Contains("| tiny | 16 | swiglu_fwd |"));
  REQUIRE(run_command(ktune_exe().string() + " bench ops --backend emu --model small", &out) == 2);
  CHECK_THAT(out, Catch::Contains("minutes for the emulation"));
}

TEST_CASE("CLI: bench adam --backend emu times the three AdamW forms on small sizes", "[cli][emu]") {
  const auto dir = ktune::test::scratch_dir("bench_adam_emu");
  std::string out;
  REQUIRE(run_command(ktune_exe().string() + " bench adam --backend emu --tensors 1,3 --numel 1000 --dtype bf16 "
                                             "--json-out " + (dir / "adam.json").string(),
                      &out) == 0);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("no copy bandwidth"));
  CHECK_THAT(out, Catch::Contains("not a GPU measurement"));
  // The dtype heads the table with what the fused step moves an element: f32 master weights, gradients and the two
  // moments read, weights and moments written (28 bytes), and the bf16 weight copy written (2 more).
  CHECK_THAT(out, Catch::Contains("Parameters bf16: the fused step moves 30 bytes an element, as its GB/s counts "
                                  "them.") &&
                      Catch::Contains("bench/peers/torch_adam.py's (fp32)"));
  const auto j = read_json(dir / "adam.json");
  CHECK(j["dtype"] == "bf16");
  CHECK(j["bytes_per_element"] == 30);
  REQUIRE(j["rows"].size() == 2);
  for (const auto& row : j["rows"]) {
    CHECK(row["dtype"] == "bf16");
    CHECK(row["fused_ms"].get<double>() > 0);
    CHECK(row["eager_chain_ms"].get<double>() > 0);
    CHECK(row["per_tensor_fused_ms"].get<double>() > 0);
    // ktune's kernels, not PyTorch's: none of PyTorch's names in the JSON or as a column.
    CHECK_FALSE(row.contains("single_tensor_eager_ms"));
    CHECK_FALSE(row.contains("compiled_single_tensor_ms"));
    // Every repetition kept, so the medians can be checked.
    for (const char* key : {"eager_chain_samples_ms", "per_tensor_fused_samples_ms", "fused_samples_ms"})
      CHECK(row[key].size() >= 1);
    std::vector<double> fused = row["fused_samples_ms"];
    std::sort(fused.begin(), fused.end());
    const std::size_t h = fused.size() / 2;
    CHECK(row["fused_ms"].get<double>() == Approx(fused.size() % 2 ? fused[h] : (fused[h - 1] + fused[h]) / 2));
    CHECK(row["fused_gbs"].is_null());
  }
  CHECK_THAT(out, Catch::Contains("| ktune per-tensor fused (adamw_single) | ktune eager chain (adamw_eager) | "
                                  "ktune fused multi-tensor (adamw) | fused GB/s |") &&
                      Catch::Contains(" ms/iter | - | - | "));
  CHECK_THAT(out, !Catch::Contains("| compiled_single_tensor_adam |") && !Catch::Contains("| _single_tensor_adam |"));
  REQUIRE(run_command(ktune_exe().string() + " bench adam --backend emu --numel 4194304", &out) == 2);
  CHECK_THAT(out, Catch::Contains("minutes for the emulation"));
}

}  // namespace cli_bench_kernels_emu_test
