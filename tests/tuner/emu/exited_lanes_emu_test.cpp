// Warp collectives wait only for the lanes of their mask that have not
// exited, as CUDA's *_sync intrinsics: a lane that returned early, or one past
// the last thread of a block whose size is not a multiple of 32, takes no part
// (a ballot has 0 for it, a shuffle from it gives the caller's own value); a
// lane that is alive and never arrives is still a deadlock; mma.sync and
// ldmatrix, which need every lane's registers, fail without them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <utility>
#include <vector>

#include "tuner/emu_probe.hpp"

namespace tuner_emu_exited_lanes_emu_test {

namespace {

using ktune::templates::ArgPack;

constexpr int kFields = 12;

const char* kProbe = R"(
// Threads from n on return first; the rest use every collective with the full mask.
__global__ void k_exited(int* out, int n) {
  const int i = threadIdx.x, lane = i % 32;
  if (i >= n) return;
  int* o = out + i * 12;
  o[0] = static_cast<int>(__ballot_sync(0xffffffffu, i % 2 == 0));
  o[1] = __all_sync(0xffffffffu, i < 1000) + 2 * __any_sync(0xffffffffu, i == n - 1);
  o[2] = __shfl_sync(0xffffffffu, i * 10, 31);
  o[3] = __shfl_down_sync(0xffffffffu, i, 4);
  o[4] = static_cast<int>(__reduce_add_sync(0xffffffffu, static_cast<unsigned>(i)));
  o[5] = static_cast<int>(__match_any_sync(0xffffffffu, i / 4));
  int pred = -1;
  o[6] = static_cast<int>(__match_all_sync(0xffffffffu, 7, &pred));
  o[7] = pred;
  __syncwarp();
  o[8] = static_cast<int>(__reduce_or_sync(0xffffffffu, 1u << lane));
  o[9] = static_cast<int>(__reduce_and_sync(0xffffffffu, ~(1u << lane)));
  o[10] = static_cast<int>(__reduce_xor_sync(0xffffffffu, static_cast<unsigned>(lane + 1)));
  o[11] = __shfl_xor_sync(0xffffffffu, i, 16);
}
// Lane 3 of each warp waits at __syncthreads while the others wait in a warp collective: alive, never there.
__global__ void k_alive_missing(int* out) {
  if (threadIdx.x % 32 == 3) __syncthreads();
  else __syncwarp();
  out[threadIdx.x] = 1;
}
// Only the first 16 lanes load fragments: an mma needs all 32.
__global__ void k_mma_exited(float* out) {
  if (threadIdx.x >= 16) return;
  unsigned a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
  float c[4] = {0.f, 0.f, 0.f, 0.f}, d[4];
  kt::mma_m16n8k16_bf16(d, a, b, c);
  out[threadIdx.x] = d[0];
}
)";

enum { kExited, kAliveMissing, kMmaExited };

ktune::test::EmuProbe& probe() {
  static ktune::test::EmuProbe p(kProbe, {"k_exited", "k_alive_missing", "k_mma_exited"});
  return p;
}

// What k_exited writes for thread i of a block of `threads` with n threads alive.
std::vector<int> expected(int i, int n) {
  const int warp = i / 32, lane = i % 32;
  const int first = warp * 32, alive = std::min(n - first, 32);  // lanes 0..alive-1 of the warp take part
  std::vector<int> e(kFields);
  unsigned ballot = 0, sum = 0, xr = 0;
  for (int l = 0; l < alive; ++l) {
    if ((first + l) % 2 == 0) ballot |= 1u << l;
    sum += static_cast<unsigned>(first + l);
    xr ^= static_cast<unsigned>(l + 1);
  }
  const unsigned taking_part = alive == 32 ? ~0u : (1u << alive) - 1;
  e[0] = static_cast<int>(ballot);
  e[1] = 1 + 2 * (n - 1 >= first && n - 1 < first + 32);
  e[2] = alive == 32 ? (first + 31) * 10 : i * 10;  // lane 31 has exited: the caller's own value
  e[3] = lane + 4 < alive ? i + 4 : i;
  e[4] = static_cast<int>(sum);
  e[5] = static_cast<int>(0xfu << (lane & ~3) & taking_part);
  e[6] = static_cast<int>(0xffffffffu);
  e[7] = 1;
  e[8] = static_cast<int>(taking_part);
  e[9] = static_cast<int>(~taking_part);
  e[10] = static_cast<int>(xr);
  e[11] = (lane ^ 16) < alive ? (i ^ 16) : i;
  return e;
}

}  // namespace

TEST_CASE("warp collectives with the full mask after some lanes returned wait only for the lanes still running",
          "[emu]") {
  auto& p = probe();
  for (const auto& [threads, n] : {std::pair{64, 40}, std::pair{64, 61}, std::pair{32, 32}}) {
    int* out = p.buffer("out", std::vector<int>(threads * kFields, -1));
    INFO(threads << " threads, " << n << " running");
    p.launch(kExited, {1, 1, 1}, {static_cast<unsigned>(threads), 1, 1}, ArgPack().add(out).add(n));
    for (int i = 0; i < n; ++i) {
      INFO("thread " << i);
      const std::vector<int> got(out + i * kFields, out + (i + 1) * kFields);
      CHECK(got == expected(i, n));
    }
  }
}

TEST_CASE("lanes past the last thread of a block that is not whole warps take no part in a full-mask collective",
          "[emu]") {
  auto& p = probe();
  int* out = p.buffer("out", std::vector<int>(48 * kFields, -1));
  p.launch(kExited, {1, 1, 1}, {48, 1, 1}, ArgPack().add(out).add(48));  // warp 1 has lanes 0..15
  for (int i = 0; i < 48; ++i) {
    INFO("thread " << i);
    const std::vector<int> got(out + i * kFields, out + (i + 1) * kFields);
    CHECK(got == expected(i, 48));
  }
}

TEST_CASE("a lane that is alive and never joins a warp collective is still a deadlock", "[emu]") {
  auto& p = probe();
  int* out = p.buffer("out", std::vector<int>(64));
  const auto error = p.launch_error(kAliveMissing, {1, 1, 1}, {64, 1, 1}, ArgPack().add(out));
  INFO(error);
  CHECK(error.find("deadlock in kernel k_alive_missing") != std::string::npos);
  CHECK(error.find("threads 3, 35 wait at __syncthreads") != std::string::npos);
  CHECK(error.find("(mask 0xffffffff; threads 3 never joined it)") != std::string::npos);
}

TEST_CASE("an mma.sync that lanes of the warp have exited before fails the block", "[emu]") {
  auto& p = probe();
  float* out = p.buffer("out", std::vector<float>(32));
  const auto error = p.launch_error(kMmaExited, {1, 1, 1}, {32, 1, 1}, ArgPack().add(out));
  INFO(error);
  CHECK(error.find("mma.sync needs every lane of the warp; lanes 0xffff0000 have exited or do not exist") !=
        std::string::npos);
}

}  // namespace tuner_emu_exited_lanes_emu_test
