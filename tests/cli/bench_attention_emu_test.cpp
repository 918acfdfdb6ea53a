// `ktune bench attention --backend emu`: seed 003's table on the emulation,
// flash beside eager mode's materialised attention, as on a GPU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support.hpp"

namespace cli_bench_attention_emu_test {

using ktune::test::ktune_exe;
using ktune::test::run_command;

TEST_CASE("CLI: bench attention --backend emu prints seed 003's table, flash beside eager", "[cli][emu][once]") {
  const auto dir = ktune::test::scratch_dir("bench_attention");
  const std::string json = (dir / "attention.json").string();
  std::string out;
  const std::string bench = ktune_exe().string() + " bench attention --backend emu --tables seed003 --dims 16 ";
  REQUIRE(run_command(bench + "--seqs 9,20 --causal --dtype bf16 --json-out " + json, &out) == 0);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("| d_model | seq_len | eager forward | of it softmax | flash forward |"));
  CHECK_THAT(out, Catch::Contains("not a GPU measurement"));
  CHECK_THAT(out, Catch::Contains("(the first forward's; every cell times its own launches so"));
  // The seed's unit beside ktune's: its times are seconds per 100 passes, a tenth of ktune's ms per pass.
  CHECK_THAT(out, Catch::Contains("ms per pass (median; the seed's times, \"100 passes\" without a unit, are "
                                  "seconds per 100 passes: 10 x a seed figure is ms per pass"));
  CHECK_THAT(out, Catch::Contains("Eager columns: eager mode's attention on the host (OpenBLAS on the host), host "
                                  "wall time of its launches, not emulated kernels: not comparable"));
  CHECK_THAT(out, Catch::Contains("| 16 | 9 | ") && !Catch::Contains(" | 0.0 | "));  // TFLOP/s cells: "-"
  std::ifstream in(json);
  const auto j = nlohmann::json::parse(in);
  REQUIRE(j["rows"].size() == 2);
  for (const auto& row : j["rows"]) {
    CHECK(row["table"] == "seed003");
    CHECK(row["causal"] == true);
    CHECK(row["forward"]["median_ms"].get<double>() > 0);
    CHECK(row["forward"]["samples_ms"].size() >= 1);  // every repetition kept
    CHECK(row["eager_forward"]["samples_ms"].size() >= 1);
    // Each cell says how it was timed: the backward is its own launches (the pre-kernel, dK/dV, dQ), not the
    // forward's one.
    CHECK_THAT(row["forward"]["method"].get<std::string>(), Catch::Contains("of 1 launch "));
    CHECK_THAT(row["backward"]["method"].get<std::string>(), Catch::Contains(" launches "));
    CHECK(row["forward_tflops"].is_null());  // a host's time is no GPU's TFLOP/s
    CHECK(row["eager_forward"]["median_ms"].get<double>() > 0);
    CHECK(row["eager_backward"]["median_ms"].get<double>() > 0);
    // Seed 003's softmax share: the forward's softmax launch alone, over the whole forward.
    CHECK(row["eager_softmax"]["median_ms"].get<double>() > 0);
    const double share =
        row["eager_softmax"]["median_ms"].get<double>() / row["eager_forward"]["median_ms"].get<double>();
    if (share <= 1)  // timed apart: on a noisy host the part may time above the whole, and has no share then
      CHECK(row["eager_softmax_share"].get<double>() == Approx(share));
    else
      CHECK(row["eager_softmax_share"].is_null());
    // Eager keeps the (seq, seq) probabilities beside q, k, v and o; flash the lse.
    const double s = row["seq"].get<double>(), elements = 8 * s * 16;
    CHECK(row["eager_memory_after_forward_mib"].get<double>() ==
          Approx((4 * elements + 8 * s * s) * 2 / (1024.0 * 1024.0)));
    CHECK(row["memory_after_forward_mib"].get<double>() ==
          Approx((4 * elements * 2 + 8 * s * 4) / (1024.0 * 1024.0)));
  }

  // Without --tables, --dims, --seqs the emulation takes small cases, not the GPU's sizes.
  REQUIRE(run_command(ktune_exe().string() + " bench attention --backend emu --no-eager", &out) == 0);
  CHECK_THAT(out, Catch::Contains("| 64 | 128 | - |"));
  CHECK_THAT(out, !Catch::Contains("leaderboard"));

  // The GPU's sizes asked for on the emulation: refused in one line before any work.
  REQUIRE(run_command(ktune_exe().string() + " bench attention --backend emu --tables leaderboard", &out) == 2);
  CHECK_THAT(out, Catch::Contains("hours for the emulation") &&
                      Catch::EndsWith("its shape is fixed: run it on a GPU, or give --tables seed003 (whose --seqs "
                                      "and --dims fit the emulation)\n"));
  CHECK(std::count(out.begin(), out.end(), '\n') == 1);
  REQUIRE(run_command(ktune_exe().string() + " bench attention --backend emu --seqs 16384", &out) == 2);
  CHECK_THAT(out, Catch::EndsWith("give smaller --seqs or --dims, or run on a GPU\n"));

  // --no-eager leaves the eager cells empty; f16 has no eager attention (the runtime has no f16 precision).
  for (const std::string args : {"--seqs 9 --no-eager", "--seqs 9 --dtype f16"}) {
    REQUIRE(run_command(bench + args, &out) == 0);
    INFO(out);
    CHECK_THAT(out, Catch::Contains("| 16 | 9 | - | - | "));
  }
}

}  // namespace cli_bench_attention_emu_test
