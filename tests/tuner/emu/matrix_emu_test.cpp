// mma.sync, ldmatrix and cp.async emulation against a naive matmul, for every
// supported shape and dtype; ex2.approx against 2^x in double; atomic_add2's
// sums (probe kernels in tuner/matrix_probe.hpp; the gpu test runs the same
// kernels on hardware).
#include <catch2/catch.hpp>

#include "tuner/emu_probe.hpp"
#include "tuner/matrix_probe.hpp"

namespace tuner_emu_matrix_emu_test {

namespace matrix = ktune::test::matrix;

namespace {

ktune::test::EmuProbe& probe() {
  static ktune::test::EmuProbe p(matrix::kSource, matrix::kKernels);
  return p;
}

}  // namespace

TEST_CASE("mma.sync 16-bit shapes match a naive matmul", "[emu]") {
  SECTION("m16n8k16 bf16") { CHECK(matrix::mma16(probe(), matrix::kBf16K16, 16, true).error < 1e-6); }
  SECTION("m16n8k16 f16") { CHECK(matrix::mma16(probe(), matrix::kF16K16, 16, false).error < 1e-6); }
  SECTION("m16n8k8 bf16") { CHECK(matrix::mma16(probe(), matrix::kBf16K8, 8, true).error < 1e-6); }
  SECTION("m16n8k8 f16") { CHECK(matrix::mma16(probe(), matrix::kF16K8, 8, false).error < 1e-6); }
}

TEST_CASE("mma.sync with A's fragments placed transposed gives a wrong product", "[emu]") {
  CHECK(matrix::mma16(probe(), matrix::kBf16K16Wrong, 16, true).error > 0.1);
}

TEST_CASE("mma.sync m16n8k8 tf32 matches a naive matmul of tf32-rounded inputs", "[emu]") {
  CHECK(matrix::mma_tf32(probe()).error < 1e-6);
}

TEST_CASE("ldmatrix x1/x2/x4 and .trans follow the PTX layout and feed mma", "[emu]") {
  matrix::check_ldmatrix(probe());
}

TEST_CASE("ex2.approx.ftz is within 2 ulp of 2^x, flushes subnormal inputs and results", "[emu]") {
  matrix::check_exp2(probe());
}

TEST_CASE("atomic_add2 adds both elements of every pair from every thread", "[emu]") {
  matrix::check_atomic_add2(probe());
}

TEST_CASE("cp.async completes groups at the covering wait, zero-fills, defers the rest", "[emu]") {
  using Order = ktune::env::EmuSchedule::Order;
  SECTION("in order: copies land at their wait") {
    ktune::test::EmuProbe in_order(matrix::kSource, matrix::kKernels, 2, {.order = Order::kInOrder});
    matrix::check_cp_async(in_order, matrix::InFlight::kNotLanded);
  }
  SECTION("reversed: copies land when issued") {
    ktune::test::EmuProbe reversed(matrix::kSource, matrix::kKernels, 2, {.order = Order::kReverse});
    matrix::check_cp_async(reversed, matrix::InFlight::kLanded);
  }
}

}  // namespace tuner_emu_matrix_emu_test
