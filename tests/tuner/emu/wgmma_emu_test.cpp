// wgmma.mma_async's emulation (templates/common/kt_emu_wgmma.hpp) against
// fp64 products: every swizzle mode, K- and M/N-major operands, the register
// form, several N and k steps that advance inside swizzled rows; a
// descriptor naming the wrong swizzle fails; D completes at its wait or when
// issued, as the schedule says; a thread that ends with one in flight fails
// (probe kernels in tuner/wgmma_probe.hpp; the gpu test runs the same
// kernels on a Hopper GPU).
#include <catch2/catch.hpp>

#include "tuner/emu_probe.hpp"
#include "tuner/wgmma_probe.hpp"

namespace tuner_emu_wgmma_emu_test {

namespace wgmma = ktune::test::wgmma;
using Order = ktune::env::EmuSchedule::Order;

namespace {

ktune::test::EmuProbe make_probe(Order order) {
  return ktune::test::EmuProbe(wgmma::kSource, wgmma::kernels(), 2, {.order = order}, "common/wgmma.cuh");
}

}  // namespace

TEST_CASE("wgmma's emulation reads every shared-memory layout and gives the product", "[emu]") {
  for (const Order order : {Order::kInOrder, Order::kReverse}) {
    auto probe = make_probe(order);
    const auto cases = wgmma::cases();
    for (std::size_t i = 0; i < cases.size(); ++i) {
      INFO(cases[i].name << (order == Order::kReverse ? " (completing when issued)" : " (completing at the wait)"));
      const double error = wgmma::run(probe, static_cast<int>(i), cases[i]).error;
      if (cases[i].wrong)
        CHECK(error > 0.1);
      else
        CHECK(error < 1e-6);
    }
  }
}

TEST_CASE("wgmma's D completes at its wait or when issued, and never after the thread ends", "[emu]") {
  SECTION("in order: D read before the wait holds its old values") {
    auto probe = make_probe(Order::kInOrder);
    const wgmma::Unwaited u = wgmma::run_unwaited(probe, true);
    CHECK(u.before[0] == 1000.0f);
    CHECK(u.after[0] == Approx(u.product0).epsilon(1e-5));
  }
  SECTION("reversed: D is the product as soon as it is issued") {
    auto probe = make_probe(Order::kReverse);
    const wgmma::Unwaited u = wgmma::run_unwaited(probe, true);
    CHECK(u.before[0] == Approx(u.product0).epsilon(1e-5));
    CHECK(u.after[0] == u.before[0]);
  }
  SECTION("a thread that ends with a wgmma in flight fails the block") {
    auto probe = make_probe(Order::kInOrder);
    CHECK_THROWS_WITH(wgmma::run_unwaited(probe, false), Catch::Contains("ended with a wgmma in flight"));
  }
}

}  // namespace tuner_emu_wgmma_emu_test
