// The ops benchmark through the emulation backend on small shapes: both
// paths validated against the reference, the report's columns filled, the
// floor made of the copy bandwidth and the empty launch, the fused launches
// counted.
#include "tuner/bench/ops_bench.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "support.hpp"

namespace tuner_bench_ops_bench_emu_test {

using namespace ktune;

TEST_CASE("bench ops runs eager chains and fused kernels, validated, on the emulation backend", "[bench][emu]") {
  auto backend = tuner::exec::make_emu_backend({1, "sm_80"});
  const std::vector<tuner::OpsBenchCase> cases = {
      {"tiny", 8, "rmsnorm_fwd", templates::Problem{"bf16", {{"rows", 19}, {"dim", 64}}}},
      {"tiny", 8, "cross_entropy_bwd", templates::Problem{"f32", {{"rows", 7}, {"vocab", 129}}}},
      {"tiny", 8, "rmsnorm_bwd", templates::Problem{"f32", {{"rows", 19}, {"dim", 64}}}},
  };
  const tuner::RunOptions options = test::time_once();
  const double copy_gbs = 100.0;  // a stand-in: the emulation has no bandwidth of its own
  const auto report = tuner::run_ops_bench(*backend, cases, nullptr, copy_gbs, options);
  REQUIRE(report.rows.size() == 3);
  CHECK(report.empty_launch_ms > 0);
  for (const auto& r : report.rows) {
    INFO(r.op.family);
    CHECK(r.fused_ms > 0);
    CHECK(r.eager_ms > 0);
    CHECK(r.eager_launches >= 4);
    CHECK(r.floor_ms == Approx(r.bytes / (copy_gbs * 1e9) * 1e3 + report.empty_launch_ms));
    CHECK(r.fused_fraction_of_copy == Approx(r.fused_gbs / copy_gbs));
    CHECK(r.fused_source.find("default") != std::string::npos);
  }
  CHECK(report.rows[0].eager_launches == 8);  // cast, square, mean, add eps, rsqrt, mul, mul, cast
  // The fused forms' launches: one each, the RMSNorm backward's dx and its dw reduction two.
  CHECK(report.rows[0].fused_launches == 1);
  CHECK(report.rows[1].fused_launches == 1);
  CHECK(report.rows[2].fused_launches == 2);
  const std::string md = report.markdown();
  CHECK(md.find("| tiny | 8 | rmsnorm_fwd |") != std::string::npos);
  // With a copy bandwidth, the floor and fused / floor are filled, and the method heads with the rows' timing.
  CHECK(md.find(fmt::format("| {:.4f} ms | {:.2f}x |", report.rows[0].floor_ms,
                            report.rows[0].fused_ms / report.rows[0].floor_ms)) != std::string::npos);
  CHECK(report.method.rfind("host emulation wall time of each row's fused launches", 0) == 0);
  CHECK(md.find(fmt::format("| {:.4f} ms (2) |", report.rows[2].fused_ms)) != std::string::npos);
  const auto j = report.to_json();
  CHECK(j["benchmark"] == "ops");
  CHECK(j["rows"].size() == 3);
  CHECK(j["rows"][2]["fused_launches"] == 2);
}

TEST_CASE("bench ops asked to stop keeps the rows measured and says it is incomplete", "[bench][emu]") {
  auto backend = tuner::exec::make_emu_backend({1, "sm_80"});
  const std::vector<tuner::OpsBenchCase> cases = {
      {"tiny", 8, "rmsnorm_fwd", templates::Problem{"f32", {{"rows", 7}, {"dim", 64}}}},
      {"tiny", 8, "rmsnorm_fwd", templates::Problem{"f32", {{"rows", 9}, {"dim", 64}}}},
      {"tiny", 8, "rmsnorm_fwd", templates::Problem{"f32", {{"rows", 11}, {"dim", 64}}}},
  };
  int progressed = 0;
  auto report = tuner::run_ops_bench(
      *backend, cases, nullptr, 100.0, test::time_once(), [&](const tuner::OpsBenchRow&) { ++progressed; },
      [&] { return progressed >= 1; });
  REQUIRE(report.rows.size() == 1);
  CHECK(report.completion.planned == 3);
  CHECK(report.completion.measured == 1);
  report.completion.stopped_by = "SIGTERM";  // as the command sets it
  CHECK_FALSE(report.completion.complete());
  CHECK_THAT(report.markdown(), Catch::Contains("**Incomplete:** stopped by SIGTERM after 1 of 3 rows"));
  const auto j = report.to_json();
  CHECK(j["complete"] == false);
  CHECK(j["stopped_by"] == "SIGTERM");
  CHECK(j["rows_planned"] == 3);
  CHECK(j["rows"].size() == 1);

  // Not stopped: whole, and no such line.
  const auto whole = tuner::run_ops_bench(*backend, cases, nullptr, 100.0, test::time_once());
  CHECK(whole.rows.size() == 3);
  CHECK(whole.completion.complete());
  CHECK(whole.to_json()["complete"] == true);
  CHECK(whole.to_json()["stopped_by"].is_null());
  CHECK_THAT(whole.markdown(), !Catch::Contains("Incomplete"));
}

}  // namespace tuner_bench_ops_bench_emu_test
