// Kernel specs on a GPU: args that are not the kernel's parameters are named
// before the launch (the driver's parameter sizes and the kinds the kernel's
// mangled name gives, as the emulation's), not read as other bytes; a buffer
// copied into a __constant__ variable. Skipped without a device.
#include <catch2/catch.hpp>

#include "spec/args_mismatch_check.hpp"
#include "spec/constant_check.hpp"
#include "support.hpp"

namespace spec_spec_gpu_test {

TEST_CASE("spec gpu: args that are not the kernel's parameters are named, not read as other bytes", "[gpu][spec]") {
  ktune::test::skip_without_gpu();
  ktune::test::check_args_mismatch("gpu", "spec-gpu-args-mismatch");
}

TEST_CASE("spec gpu: a buffer copied into a __constant__ variable before each launch, as Kernel Tuner's cmem_args",
          "[gpu][spec]") {
  ktune::test::skip_without_gpu();
  ktune::test::check_constant_copy("gpu", "spec-gpu-constant");
}

}  // namespace spec_spec_gpu_test
