// The run-time API on a GPU: a kernel launched on the caller's stream is
// enqueued there and nowhere else. A stream under graph capture records the
// launch instead of running it, so the captured graph holds one node and the
// output stays poisoned; launched again on the same stream, it runs there and
// gives x + y. Skipped without a device.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <random>
#include <vector>

#include "ktune/ktune.hpp"
#include "support.hpp"
#include "tuner/cuda/check.hpp"
#include "tuner/cuda/device.hpp"
#include "tuner/cuda/driver.hpp"

TEST_CASE("spec gpu: Kernel::launch enqueues on the caller's stream", "[gpu][spec]") {
  ktune::test::skip_without_gpu();
  using ktune::tuner::Driver;
  const std::string spec = (std::filesystem::path(KTUNE_SOURCE_DIR) / "examples/vector_add/vector_add.json").string();
  const std::int64_t n = 10007;
  const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(float);

  ktune::Runtime rt("gpu");
  const ktune::Kernel k = rt.kernel(spec, {"f32", {{"n", n}}});
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(n), y(n), z(n);
  for (auto& v : x) v = dist(rng);
  for (auto& v : y) v = dist(rng);
  const std::vector<unsigned char> poison(bytes, 0xFF);
  const std::uint64_t dx = rt.allocate(bytes), dy = rt.allocate(bytes), dz = rt.allocate(bytes);
  rt.upload(dx, x.data(), bytes);
  rt.upload(dy, y.data(), bytes);
  rt.upload(dz, poison.data(), bytes);

  ktune::tuner::Stream mine;
  const auto handle = reinterpret_cast<std::uint64_t>(mine.get());
  REQUIRE(handle != rt.stream());

  const Driver& d = Driver::get();
  KT_CHECK_CU(d.cuStreamBeginCapture(mine.get(), CU_STREAM_CAPTURE_MODE_RELAXED));
  k.launch({dx, dy, dz}, handle);
  CUgraph graph = nullptr;
  KT_CHECK_CU(d.cuStreamEndCapture(mine.get(), &graph));
  std::size_t nodes = 0;
  KT_CHECK_CU(d.cuGraphGetNodes(graph, nullptr, &nodes));
  KT_CHECK_CU(d.cuGraphDestroy(graph));
  CHECK(nodes == 1);
  rt.synchronize();
  rt.download(z.data(), dz, bytes);
  CHECK(std::isnan(z.front()));
  CHECK(std::isnan(z.back()));

  k.launch({dx, dy, dz}, handle);
  mine.synchronize();
  rt.download(z.data(), dz, bytes);
  for (std::int64_t i = 0; i < n; ++i) {
    INFO("element " << i);
    REQUIRE(z[i] == x[i] + y[i]);
  }
}
