// The emulation's mma.sync, ldmatrix, cp.async, ex2.approx and atomic_add2
// against the hardware: the probe kernels of tuner/matrix_probe.hpp run on the
// GPU with the same checks as under emulation, and the products of both must
// agree. Skipped without a device.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "support.hpp"
#include "tuner/emu_probe.hpp"
#include "tuner/gpu_probe.hpp"
#include "tuner/matrix_probe.hpp"

namespace tuner_matrix_gpu_test {

namespace matrix = ktune::test::matrix;

namespace {

/// Largest |gpu - emu| relative to the largest |emu| element.
double max_relative_difference(const std::vector<float>& gpu, const std::vector<float>& emu) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(gpu[i]) - emu[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(emu[i])));
  }
  return diff / scale;
}

}  // namespace

TEST_CASE("mma.sync on the GPU matches a naive matmul and the emulation", "[gpu][matrix]") {
  ktune::test::skip_without_gpu();
  ktune::test::GpuProbe gpu(matrix::kSource, matrix::kKernels);
  ktune::test::EmuProbe emu(matrix::kSource, matrix::kKernels);
  struct Shape {
    int kernel, k;
    bool bf16;
    const char* name;
  };
  for (const Shape s :
       {Shape{matrix::kBf16K16, 16, true, "m16n8k16 bf16"}, Shape{matrix::kF16K16, 16, false, "m16n8k16 f16"},
        Shape{matrix::kBf16K8, 8, true, "m16n8k8 bf16"}, Shape{matrix::kF16K8, 8, false, "m16n8k8 f16"}}) {
    INFO(s.name);
    const auto g = matrix::mma16(gpu, s.kernel, s.k, s.bf16);
    const auto e = matrix::mma16(emu, s.kernel, s.k, s.bf16);
    CHECK(g.error < 1e-6);
    CHECK(max_relative_difference(g.d, e.d) < 1e-6);
  }
  // The planted wrong layout is wrong on hardware too: the check has teeth.
  CHECK(matrix::mma16(gpu, matrix::kBf16K16Wrong, 16, true).error > 0.1);
  const auto g = matrix::mma_tf32(gpu);
  const auto e = matrix::mma_tf32(emu);
  CHECK(g.error < 1e-6);
  CHECK(max_relative_difference(g.d, e.d) < 1e-6);
}

TEST_CASE("ldmatrix on the GPU follows the layout the emulation implements", "[gpu][matrix]") {
  ktune::test::skip_without_gpu();
  ktune::test::GpuProbe gpu(matrix::kSource, matrix::kKernels);
  matrix::check_ldmatrix(gpu);
}

TEST_CASE("cp.async on the GPU completes groups at the covering wait and zero-fills", "[gpu][matrix]") {
  ktune::test::skip_without_gpu();
  ktune::test::GpuProbe gpu(matrix::kSource, matrix::kKernels);
  matrix::check_cp_async(gpu, matrix::InFlight::kEither);
}

TEST_CASE("ex2.approx and atomic_add2 on the GPU give what the emulation assumes", "[gpu][matrix]") {
  ktune::test::skip_without_gpu();
  ktune::test::GpuProbe gpu(matrix::kSource, matrix::kKernels);
  matrix::check_exp2(gpu);
  matrix::check_atomic_add2(gpu);
}

}  // namespace tuner_matrix_gpu_test
