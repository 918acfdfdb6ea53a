// The emulation's thread and block order (KTUNE_EMU_SCHEDULE): a kernel that reads
// another thread's shared-memory write without a barrier between them passes
// in one order and fails in another, as it would on a GPU now and then; with
// its barrier it gives the same result in every order.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "tuner/emu_probe.hpp"

namespace tuner_emu_schedule_emu_test {

namespace {

using ktune::env::EmuSchedule;
using ktune::templates::ArgPack;

// Each thread writes its slot, then reads its left neighbour's: across the
// block (__syncthreads) or within its warp (__syncwarp), the barrier kept or
// left out. `salt` makes every launch's values new, so that a slot left over
// from an earlier block on the same worker never passes for a fresh write.
const char* kProbe = R"(
__global__ void k_block_neighbour(int* out, int salt, int barrier) {
  __shared__ int s[256];
  const int t = threadIdx.x;
  s[t] = salt + blockIdx.x * 256 + t;
  if (barrier) __syncthreads();
  out[blockIdx.x * blockDim.x + t] = s[t > 0 ? t - 1 : 0];
}
__global__ void k_warp_neighbour(int* out, int salt, int barrier) {
  __shared__ int s[256];
  const int t = threadIdx.x, lane = t % 32;
  s[t] = salt + blockIdx.x * 256 + t;
  if (barrier) __syncwarp();
  out[blockIdx.x * blockDim.x + t] = s[lane > 0 ? t - 1 : t];
}
__global__ void k_block_sequence(int* out, unsigned* counter) {
  if (threadIdx.x == 0) out[blockIdx.x + gridDim.x * blockIdx.y] = atomicAdd(counter, 1u);
}
// Every warp but `writer` waits, a warp collective in its loop, for the
// flag the writer's lane 0 raises.
__global__ void k_spin_on_flag(int* out, int salt, int writer) {
  __shared__ volatile int flag;
  if (threadIdx.x == 0) flag = 0;
  __syncthreads();
  const int warp = threadIdx.x / 32;
  if (warp == writer) {
    if (threadIdx.x % 32 == 0) flag = salt + blockIdx.x;
    __syncwarp();  // the other lanes read it after
  } else {
    while (flag == 0) __syncwarp();
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = flag;
}
)";
const std::vector<std::string> kKernels = {"k_block_neighbour", "k_warp_neighbour", "k_block_sequence",
                                           "k_spin_on_flag"};

constexpr unsigned kBlocks = 8, kThreads = 128;

// Which outputs of a launch of `kernel` differ from what the barrier gives.
std::vector<unsigned> wrong(const EmuSchedule& schedule, int kernel, int salt, bool barrier) {
  ktune::test::EmuProbe p(kProbe, kKernels, 2, schedule);
  int* out = p.buffer("out", std::vector<int>(kBlocks * kThreads, -1));
  p.launch(kernel, {kBlocks, 1, 1}, {kThreads, 1, 1}, ArgPack().add(out).add(salt).add(barrier ? 1 : 0));
  std::vector<unsigned> bad;
  const auto got = p.read(out, kBlocks * kThreads);
  for (unsigned b = 0; b < kBlocks; ++b)
    for (unsigned t = 0; t < kThreads; ++t) {
      const unsigned from = kernel == 0 ? (t > 0 ? t - 1 : 0) : (t % 32 > 0 ? t - 1 : t);
      if (got[b * kThreads + t] != salt + static_cast<int>(b * 256 + from)) bad.push_back(b * kThreads + t);
    }
  return bad;
}

const EmuSchedule kInOrder{}, kReverse{.order = EmuSchedule::Order::kReverse},
    kShuffle{.order = EmuSchedule::Order::kShuffle, .seed = 1};

}  // namespace

TEST_CASE("emulation order: with their barriers both kernels are right in every thread order", "[emu]") {
  int salt = 1000000;
  for (const auto& s : {kInOrder, kReverse, kShuffle, EmuSchedule{.order = EmuSchedule::Order::kShuffle, .seed = 7}})
    for (int kernel : {0, 1}) {
      INFO("order " << static_cast<int>(s.order) << " seed " << s.seed << " kernel " << kernel);
      CHECK(wrong(s, kernel, salt += 100000, true).empty());
    }
}

TEST_CASE("emulation order: a missing __syncthreads passes in order and fails reversed and shuffled", "[emu]") {
  CHECK(wrong(kInOrder, 0, 2000000, false).empty());
  // Reversed, every thread but 0 reads its neighbour's slot before the write.
  CHECK(wrong(kReverse, 0, 3000000, false).size() == kBlocks * (kThreads - 1));
  const auto shuffled = wrong(kShuffle, 0, 4000000, false);
  CHECK(!shuffled.empty());
  CHECK(shuffled.size() < kBlocks * (kThreads - 1));
}

TEST_CASE("emulation order: a missing __syncwarp is found the same way", "[emu]") {
  CHECK(wrong(kInOrder, 1, 5000000, false).empty());
  CHECK(wrong(kReverse, 1, 6000000, false).size() == kBlocks * (kThreads - kThreads / 32));
  CHECK(!wrong(kShuffle, 1, 7000000, false).empty());
}

TEST_CASE("emulation order: a shuffle repeats with its seed and differs per block and per seed", "[emu]") {
  const auto first = wrong(kShuffle, 0, 8000000, false), again = wrong(kShuffle, 0, 9000000, false);
  CHECK(first == again);
  CHECK(first != wrong({.order = EmuSchedule::Order::kShuffle, .seed = 2}, 0, 10000000, false));
  // Each block draws its own order: the threads that read too early differ.
  std::set<std::vector<unsigned>> per_block;
  for (unsigned b = 0; b < kBlocks; ++b) {
    std::vector<unsigned> mine;
    for (unsigned i : first)
      if (i / kThreads == b) mine.push_back(i % kThreads);
    per_block.insert(mine);
  }
  CHECK(per_block.size() == kBlocks);
}

TEST_CASE("emulation order: a warp spinning on a warp collective lets the warp it waits for run", "[emu]") {
  // Reversed or shuffled, a warp runs on to its next block barrier if
  // nothing limited it; a spin loop's __syncwarp never blocks it, so a
  // waiting warp that runs before the writer would starve it. The writer is
  // the first warp, then the last: which of them the others wait for
  // depends on the order (reversed, the last warp to reach the barrier,
  // warp 0, runs on past it first).
  int salt = 11000000;
  for (const int writer : {0, static_cast<int>(kThreads / 32) - 1})
    for (const auto& s :
         {kInOrder, kReverse, kShuffle, EmuSchedule{.order = EmuSchedule::Order::kShuffle, .seed = 7}}) {
      INFO("order " << static_cast<int>(s.order) << " seed " << s.seed << " writer warp " << writer);
      salt += 100000;
      ktune::test::EmuProbe p(kProbe, kKernels, 2, s);
      int* out = p.buffer("out", std::vector<int>(kBlocks * kThreads, -1));
      p.launch(3, {kBlocks, 1, 1}, {kThreads, 1, 1}, ArgPack().add(out).add(salt).add(writer));
      const auto got = p.read(out, kBlocks * kThreads);
      std::vector<int> want(kBlocks * kThreads);
      for (unsigned i = 0; i < want.size(); ++i) want[i] = salt + static_cast<int>(i / kThreads);
      CHECK(got == want);
    }
}

TEST_CASE("emulation order: blocks start in order, reversed, or in a shuffled order", "[emu]") {
  // One worker, so the sequence each block draws is the order blocks start in.
  const auto sequence = [](const EmuSchedule& schedule) {
    ktune::test::EmuProbe p(kProbe, kKernels, 1, schedule);
    int* out = p.buffer("out", std::vector<int>(60, -1));
    unsigned* counter = p.buffer("counter", std::vector<unsigned>{0});
    p.launch(2, {12, 5, 1}, {64, 1, 1}, ArgPack().add(out).add(counter));
    return p.read(out, 60);
  };
  std::vector<int> in_order(60), reversed(60);
  for (int i = 0; i < 60; ++i) in_order[i] = i, reversed[i] = 59 - i;
  CHECK(sequence(kInOrder) == in_order);
  CHECK(sequence(kReverse) == reversed);
  const auto shuffled = sequence(kShuffle);
  CHECK(std::set<int>(shuffled.begin(), shuffled.end()).size() == 60);  // every block ran once
  CHECK(*std::min_element(shuffled.begin(), shuffled.end()) == 0);
  CHECK(*std::max_element(shuffled.begin(), shuffled.end()) == 59);
  CHECK(shuffled != in_order);
  CHECK(shuffled != reversed);
  CHECK(shuffled == sequence(kShuffle));
}

}  // namespace tuner_emu_schedule_emu_test
