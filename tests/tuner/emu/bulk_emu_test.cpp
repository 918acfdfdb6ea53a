// The emulation of sm_90's bulk reductions (kt::bulk_reduce_add, that is
// cp.reduce.async.bulk .add.f32; templates/common/kt_emu_mma.hpp): the sum
// lands at the covering bulk_wait_read or when issued, as the schedule says,
// so shared memory written again before the wait is what an in-order run
// adds; a thread that ends with one in flight, or a misaligned one, fails
// the block.
#include <catch2/catch.hpp>

#include "tuner/emu_probe.hpp"

namespace tuner_emu_bulk_emu_test {

using Order = ktune::env::EmuSchedule::Order;

namespace {

// 64 threads stage x, thread 0 adds the stage to `out` by one bulk
// reduction at `offset` floats; MODE 1 writes the stage again before its
// wait, MODE 2 never waits.
constexpr const char* kSource = R"(
template <int MODE>
__global__ void bulk_probe(const float* x, float* out, int offset) {
  __shared__ __align__(16) float stage[64];
  stage[threadIdx.x] = x[threadIdx.x];
  __syncthreads();
  if (threadIdx.x == 0) {
    kt::bulk_reduce_add(out + offset, stage, 64 * 4);
    kt::bulk_commit();
    if (MODE == 1)
      for (int i = 0; i < 64; ++i) stage[i] = 1000.0f;
    if (MODE != 2) kt::bulk_wait_read<0>();
  }
}
)";

struct Run {
  std::vector<float> out;
  std::string error;
};

Run run(Order order, int mode, int offset = 0) {
  ktune::test::EmuProbe probe(kSource, {"bulk_probe<0>", "bulk_probe<1>", "bulk_probe<2>"}, 2, {.order = order});
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[i] = 0.5f * static_cast<float>(i) - 7.0f;
  const float* dx = probe.buffer("x", x);
  float* out = probe.buffer("out", std::vector<float>(68, 1.0f));
  ktune::templates::ArgPack args;
  args.add(dx).add(out).add(offset);
  Run r;
  r.error = probe.launch_error(mode, {1, 1, 1}, {64, 1, 1}, std::move(args));
  r.out = probe.read(out, 64);
  return r;
}

}  // namespace

TEST_CASE("bulk reductions add shared memory to global memory at their wait or when issued", "[emu]") {
  SECTION("waited for: every element added once") {
    for (const Order order : {Order::kInOrder, Order::kReverse}) {
      const Run r = run(order, 0);
      REQUIRE(r.error.empty());
      for (int i = 0; i < 64; ++i) CHECK(r.out[i] == 1.0f + (0.5f * static_cast<float>(i) - 7.0f));
    }
  }
  SECTION("in order, the stage written again before the wait is what it adds") {
    const Run r = run(Order::kInOrder, 1);
    REQUIRE(r.error.empty());
    for (int i = 0; i < 64; ++i) CHECK(r.out[i] == 1001.0f);
  }
  SECTION("reversed, it reads the stage when issued") {
    const Run r = run(Order::kReverse, 1);
    REQUIRE(r.error.empty());
    CHECK(r.out[3] == 1.0f + (0.5f * 3.0f - 7.0f));
  }
  SECTION("a thread that ends with one in flight fails the block") {
    CHECK_THAT(run(Order::kInOrder, 2).error, Catch::Contains("ended with a bulk reduction in flight"));
  }
  SECTION("a destination off 16 bytes fails the block") {
    CHECK_THAT(run(Order::kInOrder, 0, 1).error, Catch::Contains("16-byte aligned"));
  }
}

}  // namespace tuner_emu_bulk_emu_test
