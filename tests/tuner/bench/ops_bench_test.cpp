#include <catch2/catch.hpp>

#include "tuner/bench/ops_bench.hpp"

namespace tuner_bench_ops_bench_test {

using namespace ktune;

tuner::OpsBenchRow row(const std::string& family, double bytes, double fused_ms, double floor_ms, double eager_ms,
                       double fraction_of_copy) {
  tuner::OpsBenchRow r;
  r.op = {"small", 256, family, templates::Problem{"bf16", {{"n", 1}}}};
  r.bytes = bytes;
  r.fused_ms = fused_ms;
  r.floor_ms = floor_ms;
  r.eager_ms = eager_ms;
  r.fused_fraction_of_copy = fraction_of_copy;
  return r;
}

TEST_CASE("bench ops sums up each op over its shapes against the families' targets", "[bench]") {
  tuner::OpsBenchReport report;
  report.copy_bandwidth_gbs = 4000;
  report.rows = {
      row("swiglu_fwd", 20e6, 0.0140, 0.0100, 0.0300, 0.40),   // 1.4x its floor: at target
      row("rmsnorm_bwd", 5e6, 0.0230, 0.0100, 0.1150, 0.10),   // 2.3x: not
      row("swiglu_fwd", 100e6, 0.0300, 0.0260, 0.0600, 0.90),  // 90 % of copy at 100 MB: at target
      row("swiglu_fwd", 64e6, 0.0500, 0.0170, 0.0500, 0.30),   // 64 MB at 30 %: not, though 2.9x its floor
      row("rmsnorm_bwd", 6e6, 0.0150, 0.0100, 0.0750, 0.12),   // 1.5x: at target
  };
  const auto summary = report.summary();
  REQUIRE(summary.size() == 2);
  const auto& swiglu = summary[0];
  CHECK(swiglu.family == "swiglu_fwd");
  CHECK(swiglu.shapes == 3);
  CHECK(swiglu.met == 2);
  CHECK(swiglu.floor_ratio_min == Approx(0.0300 / 0.0260));
  CHECK(swiglu.floor_ratio_max == Approx(0.0500 / 0.0170));
  CHECK(swiglu.large_shapes == 2);
  CHECK(swiglu.large_copy_min == Approx(0.30));
  CHECK(swiglu.large_copy_max == Approx(0.90));
  CHECK(swiglu.speedup_min == Approx(1.0));
  CHECK(swiglu.speedup_max == Approx(0.0300 / 0.0140));
  const auto& norm = summary[1];
  CHECK(norm.family == "rmsnorm_bwd");
  CHECK(norm.shapes == 2);
  CHECK(norm.met == 1);
  CHECK(norm.large_shapes == 0);
  CHECK(norm.floor_ratio_min == Approx(1.5));
  CHECK(norm.floor_ratio_max == Approx(2.3));

  const std::string md = report.markdown();
  INFO(md);
  CHECK(md.find("| swiglu_fwd | 2 of 3 | 1.15-2.94x | 30-90% (2 shapes) | 1.0-2.1x |") != std::string::npos);
  CHECK(md.find("| rmsnorm_bwd | 1 of 2 | 1.50-2.30x | - | 5.0x |") != std::string::npos);
  CHECK(md.find("at least 85% of copy where the fused kernel moves 64 MB or more, within 1.5x of the floor") !=
        std::string::npos);
  CHECK(md.find("| small | 256 | swiglu_fwd | bf16;n=1 | 20.0 | 0.0300 ms (0) | 0 | 0.0% |") != std::string::npos);

  // Without a copy bandwidth (the emulation's), no target to hold the ops to and no % of copy.
  tuner::OpsBenchReport emulated = report;
  emulated.copy_bandwidth_gbs = 0;
  const std::string emu_md = emulated.markdown();
  CHECK(emu_md.find("shapes at target") == std::string::npos);
  CHECK(emu_md.find("no copy bandwidth") != std::string::npos);
  // No GB/s either: a host's wall time is no GPU's rate.
  CHECK(emu_md.find("| small | 256 | swiglu_fwd | bf16;n=1 | 20.0 | 0.0300 ms (0) | - | - |") != std::string::npos);

  const auto j = report.to_json();
  REQUIRE(j["summary"].size() == 2);
  CHECK(j["summary"][0]["family"] == "swiglu_fwd");
  CHECK(j["summary"][0]["shapes_at_target"] == 2);
  CHECK(j["summary"][1]["large_shapes"] == 0);
  CHECK(j["summary"][1]["eager_over_fused"][0] == Approx(5.0));
  // The emulation's JSON holds no op to a target either: its rows' floor is an empty launch's host time alone.
  const auto emu_j = emulated.to_json();
  REQUIRE(emu_j["summary"].size() == 2);
  CHECK(emu_j["summary"][0]["shapes_at_target"].is_null());
  CHECK(emu_j["summary"][0]["fused_over_floor"].is_null());
  CHECK(emu_j["summary"][0]["shapes"] == 3);
}

}  // namespace tuner_bench_ops_bench_test
