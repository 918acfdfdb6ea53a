// An emulated thread has 256 KiB of stack (tuner/emu/block.hpp, kStackSize)
// with a guard page below it: a kernel whose frame needs more fails naming
// the overflow, whether it fills its frame page by page or jumps to its far
// end at once (the emulation's objects probe each page of a large frame, so
// no write lands past the guard page in another thread's stack); a frame
// within the limit runs.
#include <catch2/catch.hpp>

#include "tuner/emu_probe.hpp"

namespace tuner_emu_stack_emu_test {

using ktune::templates::ArgPack;

namespace {

const char* kProbe = R"(
constexpr int kPast = 67000;  // floats: 262 KiB, past the 256 KiB an emulated thread has
__global__ void k_stack_down(float* out) {
  volatile float big[kPast];
  for (int j = kPast - 1; j >= 0; --j) big[j] = j;  // page by page, downwards: the guard page first
  out[threadIdx.x] = big[threadIdx.x];
}
__global__ void k_stack_jump(float* out) {
  volatile float big[kPast];
  big[kPast - 1] = 1.0f;
  big[0] = 2.0f;  // 262 KiB down at once: past the guard page, but for the probes
  out[threadIdx.x] = big[0] + big[kPast - 1];
}
__global__ void k_stack_fits(float* out) {
  volatile float big[16000];  // 62.5 KiB
  big[15999] = 1.0f;
  big[0] = 2.0f;
  out[blockIdx.x * blockDim.x + threadIdx.x] = big[0] + big[15999];
}
)";
enum { kDown, kJump, kFits };

}  // namespace

TEST_CASE("emu: a frame past an emulated thread's 256 KiB of stack fails naming the overflow, filled page by page "
          "or jumped to at once, and one within it runs",
          "[emu]") {
  ktune::test::EmuProbe p(kProbe, {"k_stack_down", "k_stack_jump", "k_stack_fits"});
  float* out = p.buffer("out", std::vector<float>(64, -1.0f));
  for (const int kernel : {kDown, kJump}) {
    INFO(kernel);
    const auto error = p.launch_error(kernel, {2, 1, 1}, {32, 1, 1}, ArgPack().add(out));
    CHECK_THAT(error, Catch::Contains("stack overflow") && Catch::Contains("at most 256 KiB of stack"));
  }
  CHECK(p.launch_error(kFits, {2, 1, 1}, {32, 1, 1}, ArgPack().add(out)).empty());
  for (const float v : p.read(out, 64)) CHECK(v == 3.0f);
}

}  // namespace tuner_emu_stack_emu_test
