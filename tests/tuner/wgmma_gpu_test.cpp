// The emulation's wgmma against the hardware: the probe kernels of
// tuner/wgmma_probe.hpp, compiled for sm_90a, run on a Hopper GPU with the
// same checks as under emulation, and both products must agree. Skipped
// without a device, and on a device other than sm_90.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "support.hpp"
#include "tuner/emu_probe.hpp"
#include "tuner/gpu_probe.hpp"
#include "tuner/wgmma_probe.hpp"

namespace tuner_wgmma_gpu_test {

namespace wgmma = ktune::test::wgmma;

TEST_CASE("wgmma on a Hopper GPU reads every shared-memory layout as the emulation does", "[gpu][matrix]") {
  ktune::test::skip_without_gpu();
  ktune::test::skip_unless_arch(ktune::tuner::Context().info().arch(), "sm_90", "wgmma");
  ktune::test::GpuProbe gpu(wgmma::kSource, wgmma::kernels(), "common/wgmma.cuh", "sm_90a");
  ktune::test::EmuProbe emu(wgmma::kSource, wgmma::kernels(), 2, ktune::env::emu_schedule(), "common/wgmma.cuh");
  const auto cases = wgmma::cases();
  for (std::size_t i = 0; i < cases.size(); ++i) {
    INFO(cases[i].name);
    const wgmma::Product g = wgmma::run(gpu, static_cast<int>(i), cases[i]);
    // The emulation swizzles offsets from dynamic shared memory's start: the
    // hardware's address bits where that start is 1024-aligned.
    INFO("dynamic shared memory starts at shared address " << g.base << "; relative error " << g.error);
    if (cases[i].wrong) {
      CHECK(g.error > 0.1);
      continue;
    }
    CHECK(g.error < 1e-5);
    const wgmma::Product e = wgmma::run(emu, static_cast<int>(i), cases[i]);
    double diff = 0, scale = 0;
    for (std::size_t j = 0; j < g.d.size(); ++j) {
      diff = std::max(diff, std::fabs(static_cast<double>(g.d[j]) - e.d[j]));
      scale = std::max(scale, std::fabs(static_cast<double>(e.d[j])));
    }
    CHECK(diff / scale < 1e-5);
  }
}

}  // namespace tuner_wgmma_gpu_test
