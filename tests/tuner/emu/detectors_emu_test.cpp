// Errors a GPU would hide or crash on become clear emulation errors, and the
// process goes on: a barrier not every thread reaches, a warp collective
// whose lanes never all arrive, out-of-bounds accesses to argument buffers
// and to dynamic shared memory (a write just before it too), indices outside a static __shared__ or
// register array, misaligned vector loads and cp.async copies, __trap(), a
// failed device assert; and shared memory starts every block as NaN bytes.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include <fmt/format.h>

#include "templates/embedded.hpp"
#include "tuner/emu_probe.hpp"

namespace tuner_emu_detectors_emu_test {

namespace {

const char* kProbe = R"(
__global__ void k_barrier_deadlock(int* out) {
  if (threadIdx.x < 32) __syncthreads();  // threads 32.. never arrive: a hang on a GPU
  out[threadIdx.x] = 1;
}
__global__ void k_warp_deadlock(int* out) {
  // Lanes 16..31 never join the full-mask collective: they wait at a barrier (lanes that exit would not be waited
  // for).
  if (threadIdx.x % 32 < 16) __syncwarp();
  else __syncthreads();
  out[threadIdx.x] = 1;
}
__global__ void k_overrun(float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) out[i] = 1.0f;  // off by one... and then some: i == n writes past the end
}
__global__ void k_far_read(float* out, const float* in) {
  out[threadIdx.x] = in[threadIdx.x + 1024];
}
__global__ void k_smem_overrun(float* out) {
  float* s = kt::dynamic_shared<float>();
  s[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x];
}
__global__ void k_trap(int* out) {
  if (threadIdx.x == 3) __trap();
  out[threadIdx.x] = 1;
}
__global__ void k_misaligned(float* out, const float* in, int offset) {
  const float4* v = reinterpret_cast<const float4*>(in + offset) + threadIdx.x;
  out[threadIdx.x] = v->x + v->y + v->z + v->w;  // member accesses: g++ and clang++ check these
}
__global__ void k_static_smem(float* out, int write) {
  __shared__ float s[64];
  if (write) s[threadIdx.x] = 1.0f + blockIdx.x;
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = s[threadIdx.x];
}
__global__ void k_static_smem_overrun(float* out, int extra) {
  __shared__ float tile[4][32];
  tile[threadIdx.x / 32][threadIdx.x % 32] = 1.0f;  // threads 128.. write rows past the tile
  __syncthreads();
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  acc[(threadIdx.x + extra) % 8] += tile[0][threadIdx.x % 32];  // index 4.. past the register array
  out[threadIdx.x] = acc[0];
}
__global__ void k_before_read(float* out, const float* in) {
  out[threadIdx.x] = in[static_cast<int>(threadIdx.x) - 1];  // thread 0 reads the element before the buffer
}
__global__ void k_assert(int* out) {
  assert(threadIdx.x < 16);  // as NVRTC takes it: no header
  out[threadIdx.x] = 1;
}
#include <cassert>  // a host header's assert (glibc's) ends the block too, through the same hook
__global__ void k_assert_glibc(int* out) {
  assert(threadIdx.x < 8);
  out[threadIdx.x] = 1;
}
__global__ void k_smem_before(float* out) {
  float* s = kt::dynamic_shared<float>();
  s[threadIdx.x] = 1.0f;
  if (blockIdx.x == 1 && threadIdx.x == 0) s[-1] = 2.0f;  // before its start: no guard page there, the canary
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x];
}
__global__ void k_misaligned_copy(float* out, const float* in, int offset) {
  __shared__ __align__(16) float s[128];
  kt::cp_async_16(s + 4 * threadIdx.x, in + offset + 4 * threadIdx.x);
  kt::cp_async_commit();
  kt::cp_async_wait_all();
  out[threadIdx.x] = s[4 * threadIdx.x];
}
__global__ void k_float_cast(int* out, unsigned char* bytes, const float* in) {
  out[threadIdx.x] = static_cast<int>(in[threadIdx.x]);  // a GPU saturates 3e9 to INT_MAX; x86 gives INT_MIN
  bytes[threadIdx.x] = (unsigned char)(in[threadIdx.x] - 100.0f);  // a GPU gives 0 for a negative value
}
)";

enum { kBarrier, kWarp, kOverrun, kFarRead, kSmem, kTrap, kMisaligned, kMisalignedCopy, kStaticSmem, kStaticOverrun,
       kAssert, kBeforeRead, kAssertGlibc, kSmemBefore, kFloatCast };

ktune::test::EmuProbe& probe() {
  // In order, whatever KTUNE_EMU_SCHEDULE says: a message names the first
  // thread to fault, thread 0 of the block when every thread does.
  static ktune::test::EmuProbe p(kProbe,
                                 {"k_barrier_deadlock", "k_warp_deadlock", "k_overrun", "k_far_read",
                                  "k_smem_overrun", "k_trap", "k_misaligned", "k_misaligned_copy",
                                  "k_static_smem", "k_static_smem_overrun", "k_assert",
                                  "k_before_read", "k_assert_glibc", "k_smem_before", "k_float_cast"},
                                 2, ktune::env::EmuSchedule{});
  return p;
}

using ktune::templates::ArgPack;

}  // namespace

TEST_CASE("a barrier that not every thread reaches is reported, naming kernel, block and threads", "[emu]") {
  auto& p = probe();
  int* out = p.buffer("out", std::vector<int>(64));
  const auto error = p.launch_error(kBarrier, {1, 1, 1}, {64, 1, 1}, ArgPack().add(out));
  INFO(error);
  // Threads that returned before it: undefined in CUDA (a GPU may hang or go on), not a certain deadlock.
  CHECK(error.rfind("emulation: a __syncthreads that threads 32-63 never reach (they have exited) in kernel "
                    "k_barrier_deadlock, block (0,0,0): threads 0-31 wait at it; CUDA leaves a barrier not every "
                    "thread of the block reaches undefined",
                    0) == 0);
}

TEST_CASE("a warp collective some lanes never join is reported", "[emu]") {
  auto& p = probe();
  int* out = p.buffer("out", std::vector<int>(32));
  const auto error = p.launch_error(kWarp, {1, 1, 1}, {32, 1, 1}, ArgPack().add(out));
  INFO(error);
  CHECK(error.find("deadlock in kernel k_warp_deadlock") != std::string::npos);
  CHECK(error.find("threads 0-15 wait in a warp collective (mask 0xffffffff; threads 16-31 never joined it)") !=
        std::string::npos);
}

TEST_CASE("an out-of-bounds write past a buffer names kernel, thread and offset", "[emu]") {
  auto& p = probe();
  float* out = p.buffer("buffer 'out'", std::vector<float>(256));
  const auto error = p.launch_error(kOverrun, {2, 1, 1}, {256, 1, 1}, ArgPack().add(out).add(256));
  INFO(error);
  CHECK(error.find("out-of-bounds write in kernel k_overrun, block (1,0,0), thread (0,0,0)") != std::string::npos);
  CHECK(error.find("byte offset 1024 of buffer 'out' (1024 bytes), the first byte past its end") != std::string::npos);
  // The process survives and the executor keeps working.
  CHECK(p.launch_error(kOverrun, {1, 1, 1}, {255, 1, 1}, ArgPack().add(out).add(255)).empty());
}

TEST_CASE("an out-of-bounds read far from a buffer is reported", "[emu]") {
  auto& p = probe();
  float* out = p.buffer("out", std::vector<float>(32));
  const float* in = p.buffer("in", std::vector<float>(32));
  const auto error = p.launch_error(kFarRead, {1, 1, 1}, {32, 1, 1}, ArgPack().add(out).add(in));
  INFO(error);
  CHECK(error.find("in kernel k_far_read") != std::string::npos);
  CHECK(error.find("out-of-bounds read") != std::string::npos);
  CHECK(error.find("byte offset 4096 of in (128 bytes)") != std::string::npos);
  // So far from it, the buffer is only the nearest one to the address: said so, as it may be another's pointer.
  CHECK_THAT(error, Catch::EndsWith("3969 bytes after its last (the nearest buffer to the address: the pointer used "
                                    "may be another buffer's)"));
  // And the line of the rendered source (what `ktune render` prints) that faulted.
  const std::string source = "// probe\n" + ktune::templates::expand_includes("common/kt.cuh") + kProbe;
  const auto line = 1 + std::count(source.begin(), source.begin() + static_cast<long>(source.find("in[threadIdx.x + "
                                                                                                 "1024]")),
                                   '\n');
  CHECK_THAT(error, Catch::Contains(fmt::format("thread (0,0,0) at rendered.cu:{}: byte offset", line)));
}

TEST_CASE("a read just before a buffer finds NaN, not a plausible value, and a write there is found", "[emu]") {
  auto& p = probe();
  float* out = p.buffer("out", std::vector<float>(32, 0.0f));
  const float* in = p.buffer("in", std::vector<float>(32, 2.0f));
  REQUIRE(p.launch_error(kBeforeRead, {1, 1, 1}, {32, 1, 1}, ArgPack().add(out).add(in)).empty());
  const auto got = p.read(out, 32);
  CHECK(std::isnan(got[0]));
  CHECK(std::count(got.begin() + 1, got.end(), 2.0f) == 31);
  // And a write there is found, even of -1 (all ones, the poison's bits).
  ktune::tuner::emu::GuardedBuffer b("b", 40);
  CHECK(b.check_canary().empty());
  const std::int32_t minus_one = -1;
  std::memcpy(b.data() - 4, &minus_one, sizeof minus_one);
  CHECK(b.check_canary() == "out-of-bounds write: 4 bytes before the start of b (40 bytes) was overwritten");
  // Past its end, in the bytes its 16-byte aligned start leaves before the guard page.
  ktune::tuner::emu::GuardedBuffer c("c", 40);
  c.data()[40] = std::byte{0};
  CHECK(c.check_canary() == "out-of-bounds write: byte offset 40 of c (40 bytes), the first byte past its end was "
                            "overwritten");
}

TEST_CASE("dynamic shared memory used past the launch's size is reported", "[emu]") {
  auto& p = probe();
  float* out = p.buffer("out", std::vector<float>(64));
  const auto error = p.launch_error(kSmem, {1, 1, 1}, {64, 1, 1}, ArgPack().add(out), 32 * sizeof(float));
  INFO(error);
  CHECK(error.find("out-of-bounds write in kernel k_smem_overrun") != std::string::npos);
  CHECK(error.find("of dynamic shared memory (128 bytes)") != std::string::npos);
  CHECK(p.launch_error(kSmem, {1, 1, 1}, {64, 1, 1}, ArgPack().add(out), 64 * sizeof(float)).empty());
  // A write just before its start, in its page's canary, is found after the block that made it.
  const auto before = p.launch_error(kSmemBefore, {2, 1, 1}, {64, 1, 1}, ArgPack().add(out), 64 * sizeof(float));
  CHECK(before == "emulation: out-of-bounds write: 4 bytes before the start of dynamic shared memory (256 bytes) was "
                  "overwritten by kernel k_smem_before, block (1,0,0)");
  CHECK(p.launch_error(kSmemBefore, {1, 1, 1}, {64, 1, 1}, ArgPack().add(out), 64 * sizeof(float)).empty());
  // None at all: kt::dynamic_shared() is null, and the message says why.
  const auto none = p.launch_error(kSmem, {1, 1, 1}, {64, 1, 1}, ArgPack().add(out), 0);
  INFO(none);
  CHECK_THAT(none, Catch::Contains("invalid write of address ") &&
                       Catch::Contains(": a null pointer (if it came from kt::dynamic_shared(): the launch has "
                                       "no dynamic shared memory, so that is null; a kernel spec's shared_bytes "
                                       "sizes it)"));
}

TEST_CASE("static __shared__ variables start every block as NaN bytes, not as the last block left them", "[emu]") {
  auto& p = probe();
  float* out = p.buffer("out", std::vector<float>(8 * 64, 0.0f));
  REQUIRE(p.launch_error(kStaticSmem, {8, 1, 1}, {64, 1, 1}, ArgPack().add(out).add(1)).empty());
  for (int b = 0; b < 8; ++b) CHECK(p.read(out, 8 * 64)[b * 64 + 5] == 1.0f + b);
  // Blocks that read without writing see no earlier block's values.
  REQUIRE(p.launch_error(kStaticSmem, {8, 1, 1}, {64, 1, 1}, ArgPack().add(out).add(0)).empty());
  for (const float v : p.read(out, 8 * 64)) {
    std::uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    CHECK(bits == 0xffffffffu);
  }
}

TEST_CASE("an index past a static __shared__ or register array is reported with its line", "[emu]") {
  auto& p = probe();
  float* out = p.buffer("out", std::vector<float>(160));
  // 128 threads, all within the tile; extra 4 puts thread 0's index into acc at 4, past its end.
  std::string error = p.launch_error(kStaticOverrun, {1, 1, 1}, {128, 1, 1}, ArgPack().add(out).add(4));
  INFO(error);
  CHECK_THAT(error, Catch::StartsWith("emulation: index 4 out of bounds of 'float [4]' (rendered.cu:"));
  CHECK_THAT(error, Catch::Contains("(kernel k_static_smem_overrun, block (0,0,0), thread (0,0,0))"));
  error = p.launch_error(kStaticOverrun, {1, 1, 1}, {160, 1, 1}, ArgPack().add(out).add(0));
  INFO(error);
  CHECK_THAT(error, Catch::StartsWith("emulation: index 4 out of bounds of 'float [4][32]' (rendered.cu:"));
  CHECK_THAT(error, Catch::Contains("thread (128,0,0))"));
  // The process survives, and a launch within bounds runs.
  REQUIRE(p.launch_error(kStaticOverrun, {1, 1, 1}, {4, 1, 1}, ArgPack().add(out).add(0)).empty());
  CHECK(p.read(out, 4) == std::vector<float>{1.0f, 0.0f, 0.0f, 0.0f});
}

TEST_CASE("a device assert that fails ends the launch with its expression and line", "[emu]") {
  auto& p = probe();
  int* out = p.buffer("out", std::vector<int>(32));
  REQUIRE(p.launch_error(kAssert, {1, 1, 1}, {16, 1, 1}, ArgPack().add(out)).empty());
  const auto error = p.launch_error(kAssert, {1, 1, 1}, {32, 1, 1}, ArgPack().add(out));
  INFO(error);
  CHECK_THAT(error, Catch::StartsWith("emulation: assertion 'threadIdx.x < 16' failed (rendered.cu:") &&
                        Catch::EndsWith("(kernel k_assert, block (0,0,0), thread (16,0,0))"));
  // After a source includes <cassert>, its assert ends the block the same way, not the process.
  const auto glibc = p.launch_error(kAssertGlibc, {1, 1, 1}, {32, 1, 1}, ArgPack().add(out));
  INFO(glibc);
  CHECK_THAT(glibc, Catch::StartsWith("emulation: assertion 'threadIdx.x < 8' failed (rendered.cu:") &&
                        Catch::EndsWith("(kernel k_assert_glibc, block (0,0,0), thread (8,0,0))"));
}

TEST_CASE("__trap ends the launch with an error", "[emu]") {
  auto& p = probe();
  int* out = p.buffer("out", std::vector<int>(32));
  const auto error = p.launch_error(kTrap, {1, 1, 1}, {32, 1, 1}, ArgPack().add(out));
  CHECK(error == "emulation: __trap() called (kernel k_trap, block (0,0,0), thread (3,0,0))");
}

TEST_CASE("a vector load from a misaligned address is reported, as a GPU faults on it", "[emu]") {
  auto& p = probe();
  float* out = p.buffer("out", std::vector<float>(32));
  const float* in = p.buffer("in", std::vector<float>(132, 1.0f));
  REQUIRE(p.launch_error(kMisaligned, {1, 1, 1}, {32, 1, 1}, ArgPack().add(out).add(in).add(4)).empty());
  CHECK(p.read(out, 32) == std::vector<float>(32, 4.0f));
  const auto error = p.launch_error(kMisaligned, {1, 1, 1}, {32, 1, 1}, ArgPack().add(out).add(in).add(1));
  INFO(error);
  CHECK_THAT(error, Catch::StartsWith("emulation: misaligned ") && Catch::Contains(" float4' at address 0x"));
  CHECK_THAT(error, Catch::Contains("which needs 16-byte alignment (rendered.cu:"));
  CHECK_THAT(error, Catch::Contains("(kernel k_misaligned, block (0,0,0), thread (0,0,0))"));
}

TEST_CASE("a thread that runs on without reaching a barrier or its end is reported as a hang, naming it and its line",
          "[emu]") {
  // On a GPU the launch never ends; here the watchdog ends it after its limit (1 s for the test, 60 by default).
  const std::string body = R"(
__global__ void k_spin(int* out, int spin) {
  volatile int s = spin;
  if (threadIdx.x == 5) while (s) {}  // waits for what no thread writes
  out[threadIdx.x] = 1;
}
)";
  ktune::test::EmuProbe p(body, {"k_spin"}, 2, ktune::env::EmuSchedule{}, "common/kt.cuh", 1);
  int* out = p.buffer("out", std::vector<int>(64));
  const auto error = p.launch_error(0, {2, 1, 1}, {64, 1, 1}, ArgPack().add(out).add(1));
  INFO(error);
  const std::string source = "// probe\n" + ktune::templates::expand_includes("common/kt.cuh") + body;
  const auto line = 1 + std::count(source.begin(), source.begin() + static_cast<long>(source.find("while (s)")), '\n');
  CHECK_THAT(error, Catch::StartsWith("emulation: hang in kernel k_spin, block (") &&
                        Catch::Contains(fmt::format("thread (5,0,0) at rendered.cu:{}: it ran 1 s without reaching a "
                                                    "barrier, a warp collective or its end",
                                                    line)));
  // The executor goes on: the same kernel that ends passes.
  CHECK(p.launch_error(0, {2, 1, 1}, {64, 1, 1}, ArgPack().add(out).add(0)).empty());
}

TEST_CASE("a cp.async from a misaligned address is reported", "[emu]") {
  auto& p = probe();
  float* out = p.buffer("out", std::vector<float>(32));
  std::vector<float> values(132);
  for (int i = 0; i < 132; ++i) values[i] = static_cast<float>(i);
  const float* in = p.buffer("in", values);
  REQUIRE(p.launch_error(kMisalignedCopy, {1, 1, 1}, {32, 1, 1}, ArgPack().add(out).add(in).add(4)).empty());
  CHECK(p.read(out, 32)[31] == 128.0f);
  const auto error = p.launch_error(kMisalignedCopy, {1, 1, 1}, {32, 1, 1}, ArgPack().add(out).add(in).add(2));
  INFO(error);
  CHECK_THAT(error, Catch::StartsWith("emulation: cp.async of 16 bytes from 0x"));
  CHECK_THAT(error, Catch::Contains("both addresses must be 16-byte aligned"));
  CHECK_THAT(error, Catch::Contains("(kernel k_misaligned_copy, block (0,0,0), thread (0,0,0))"));
}

TEST_CASE("a float-to-integer conversion out of the integer's range ends the launch with its line", "[emu]") {
  auto& p = probe();
  int* out = p.buffer("out", std::vector<int>(2));
  unsigned char* bytes = p.buffer("bytes", std::vector<unsigned char>(2));
  const float* big = p.buffer("in", std::vector<float>{4.5e9f, 150.0f});
  const auto error = p.launch_error(kFloatCast, {1, 1, 1}, {2, 1, 1}, ArgPack().add(out).add(bytes).add(big));
  INFO(error);
  CHECK(error.find("conversion of 4.5e+09 from 'float' to 'int' out of its range (rendered.cu:") !=
        std::string::npos);
  CHECK(error.find("a GPU saturates it to the nearest end and NaN to 0") != std::string::npos);
  const float* negative = p.buffer("in", std::vector<float>{50.0f, 150.0f});
  const auto byte_error =
      p.launch_error(kFloatCast, {1, 1, 1}, {2, 1, 1}, ArgPack().add(out).add(bytes).add(negative));
  INFO(byte_error);
  CHECK(byte_error.find("from 'float' to 'unsigned char' out of its range") != std::string::npos);
  const float* nan = p.buffer("in", std::vector<float>{std::nanf(""), 150.0f});
  CHECK(p.launch_error(kFloatCast, {1, 1, 1}, {2, 1, 1}, ArgPack().add(out).add(bytes).add(nan))
            .find("conversion of nan from 'float' to 'int'") != std::string::npos);
  const float* in_range = p.buffer("in", std::vector<float>{100.5f, 355.0f});
  CHECK(p.launch_error(kFloatCast, {1, 1, 1}, {2, 1, 1}, ArgPack().add(out).add(bytes).add(in_range)).empty());
  CHECK(out[0] == 100);
  CHECK(out[1] == 355);
  CHECK(bytes[0] == 0);
  CHECK(bytes[1] == 255);
}

}  // namespace tuner_emu_detectors_emu_test
