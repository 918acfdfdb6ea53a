// The emulation of named barriers (kt::named_barrier_sync / _arrive, that is
// bar.sync / bar.arrive with an id and a thread count): two groups of 128
// threads take turns through two barriers, in every schedule; a sync no
// arrival completes is a deadlock, an arrival no sync completes fails the
// block, and ids or counts a GPU refuses fail it too.
#include <catch2/catch.hpp>

#include "tuner/emu_probe.hpp"

namespace tuner_emu_named_barrier_emu_test {

using Order = ktune::env::EmuSchedule::Order;

namespace {

// Threads 0-127 are group 0, 128-255 group 1; each round, the first thread
// of a group appends the group to a log. MODE 0 takes turns: group g waits
// at barrier 1 + g, then lets the other group go at barrier 2 - g (group 1
// lets group 0 start, and does not let it go after the last round). MODE 1
// takes no turns; MODE 2 never lets group 0 start; MODE 3 lets it go after
// the last round too; MODE 4 waits at barrier 16; MODE 5 counts 100 threads.
constexpr const char* kSource = R"(
template <int MODE>
__global__ void turns(int* out, int rounds) {
  constexpr unsigned COUNT = MODE == 5 ? 100 : 256;
  __shared__ int log[64];
  __shared__ int length;
  const unsigned g = threadIdx.x / 128;
  if (threadIdx.x == 0) length = 0;
  __syncthreads();
  if ((MODE == 0 || MODE == 3) && g == 1) kt::named_barrier_arrive<1, 256>();
  for (int r = 0; r < rounds; ++r) {
    if (MODE != 1) {
      if (g == 0)
        kt::named_barrier_sync<MODE == 4 ? 16 : 1, COUNT>();
      else
        kt::named_barrier_sync<2, COUNT>();
    }
    if (threadIdx.x % 128 == 0) log[length++] = static_cast<int>(g);
    if (MODE != 1 && MODE != 2) {
      if (g == 0)
        kt::named_barrier_arrive<2, 256>();
      else if (MODE == 3 || r + 1 < rounds)
        kt::named_barrier_arrive<1, 256>();
    }
  }
  __syncthreads();
  if (threadIdx.x < 2 * rounds) out[threadIdx.x] = log[threadIdx.x];
}
)";

struct Run {
  std::vector<int> log;
  std::string error;
};

constexpr int kRounds = 6;

Run run(Order order, int mode) {
  ktune::test::EmuProbe probe(kSource,
                              {"turns<0>", "turns<1>", "turns<2>", "turns<3>", "turns<4>", "turns<5>"}, 2,
                              {.order = order});
  int* out = probe.buffer("out", std::vector<int>(2 * kRounds, -1));
  ktune::templates::ArgPack args;
  args.add(out).add(kRounds);
  Run r;
  r.error = probe.launch_error(mode, {2, 1, 1}, {256, 1, 1}, std::move(args));
  r.log = probe.read(out, 2 * kRounds);
  return r;
}

std::vector<int> alternating() {
  std::vector<int> v;
  for (int r = 0; r < kRounds; ++r) v.insert(v.end(), {0, 1});
  return v;
}

}  // namespace

TEST_CASE("named barriers let two groups of a block take turns", "[emu]") {
  SECTION("taking turns, the groups alternate in every schedule") {
    for (const Order order : {Order::kInOrder, Order::kReverse, Order::kShuffle}) {
      const Run r = run(order, 0);
      REQUIRE(r.error.empty());
      CHECK(r.log == alternating());
    }
  }
  SECTION("without the barriers they do not (so the check above can fail)") {
    for (const Order order : {Order::kInOrder, Order::kReverse}) {
      const Run r = run(order, 1);
      REQUIRE(r.error.empty());
      CHECK(r.log != alternating());
    }
  }
  SECTION("a wait no arrival completes is a deadlock that names the barrier") {
    CHECK_THAT(run(Order::kInOrder, 2).error,
               Catch::Contains("wait at named barriers (the first at 1, 128 of its 256"));
  }
  SECTION("an arrival no wait completes fails the block") {
    CHECK_THAT(run(Order::kInOrder, 3).error,
               Catch::Contains("ended with 128 of the 256 threads of named barrier 1 arrived"));
  }
  SECTION("ids and counts a GPU refuses fail the block") {
    CHECK_THAT(run(Order::kInOrder, 4).error, Catch::Contains("named barrier 16: ids are 1..15"));
    CHECK_THAT(run(Order::kInOrder, 5).error, Catch::Contains("the count is whole warps"));
  }
}

}  // namespace tuner_emu_named_barrier_emu_test
