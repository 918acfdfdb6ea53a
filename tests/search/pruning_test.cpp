// Static pruning rules on synthetic resource reports.
#include "search/pruning.hpp"

#include <catch2/catch.hpp>

namespace search_pruning_test {

using namespace ktune::search;

TEST_CASE("pruning: limits give a verdict with a reason", "[search][pruning]") {
  const ktune::DeviceLimits h100 = ktune::DeviceLimits::for_arch("sm_90");
  ResourceUsage u{64, 0, 16 * 1024, 0, 256};
  SECTION("ok, with occupancy") {
    const auto r = prune(u, h100);
    CHECK(r.verdict == Verdict::kOk);
    CHECK(r.reason.empty());
    // 64 regs x 256 threads = 16K regs per block -> 4 blocks; 8 warps each = 32 of 64 warps.
    CHECK(r.blocks_per_sm == 4);
    CHECK(r.occupancy == Approx(0.5));
    CHECK(r.limited_by == "registers");
  }
  SECTION("spills rank last") {
    u.spill_bytes = 128;
    const auto r = prune(u, h100);
    CHECK(r.verdict == Verdict::kRankLast);
    CHECK_THAT(r.reason, Catch::Contains("spills 128 bytes"));
  }
  SECTION("static shared memory over the static limit") {
    u.static_shared_bytes = 64 * 1024;
    const auto r = prune(u, h100);
    CHECK(r.verdict == Verdict::kPruned);
    CHECK_THAT(r.reason, Catch::Contains("static shared memory"));
  }
  SECTION("dynamic + static shared memory over the block limit") {
    u.dynamic_shared_bytes = 220 * 1024;
    const auto r = prune(u, h100);
    CHECK(r.verdict == Verdict::kPruned);
    CHECK_THAT(r.reason, Catch::Contains("shared memory per block"));
  }
  SECTION("registers x threads over the register file") {
    u = {255, 0, 0, 0, 1024};
    const auto r = prune(u, h100);
    CHECK(r.verdict == Verdict::kPruned);
    CHECK_THAT(r.reason, Catch::Contains("register file"));
  }
  SECTION("threads over the block limit") {
    u.threads_per_block = 2048;
    CHECK(prune(u, h100).verdict == Verdict::kPruned);
  }
  SECTION("zero occupancy: fits the block limit, not the SM with its reservation") {
    ktune::DeviceLimits small = h100;
    small.smem_per_sm = 100 * 1024;
    small.max_smem_per_block = 100 * 1024;
    u.static_shared_bytes = 0;
    u.dynamic_shared_bytes = 100 * 1024;  // + 1 KB reservation > 100 KB per SM
    const auto r = prune(u, small);
    CHECK(r.verdict == Verdict::kPruned);
    CHECK_THAT(r.reason, Catch::Contains("zero occupancy"));
    CHECK(r.limited_by == "shared memory");
  }
  SECTION("shared memory limits occupancy") {
    u = {32, 0, 0, 100 * 1024, 128};
    const auto r = prune(u, h100);
    CHECK(r.verdict == Verdict::kOk);
    CHECK(r.blocks_per_sm == 2);
    CHECK(r.limited_by == "shared memory");
  }
}

}  // namespace search_pruning_test
