// The run-time API on a GPU: a kernel launched on the caller's stream is
// enqueued there and nowhere else. A stream under graph capture records the
// launch instead of running it, so the captured graph holds one node and the
// output stays poisoned; launched again on the same stream, it runs there and
// gives x + y. A thread other than the Runtime's compiles, launches and
// copies through it. A kernel whose compile the binary cache cannot keep
// runs and says why. Runtime::tune measures on the device and its winner
// computes x + y; an allocation too small is refused before a launch, and a
// part of one is copied. A built-in family's run-time parameters (AdamW's
// hyper-parameters and step, a scale, alpha) reach the device's kernels.
// Skipped without a device.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "spec/family_parameters_check.hpp"
#include "spec/vector_add_run.hpp"
#include "support.hpp"
#include "tuner/cuda/check.hpp"
#include "tuner/cuda/device.hpp"
#include "tuner/cuda/driver.hpp"

namespace spec_runtime_gpu_test {

TEST_CASE("spec gpu: Kernel::launch enqueues on the caller's stream", "[gpu][spec]") {
  ktune::test::skip_without_gpu();
  using ktune::tuner::Driver;
  ktune::Runtime rt("gpu");
  ktune::test::VectorAddRun run{rt, 10007};
  run.poison_z();

  ktune::tuner::Stream mine;
  const auto handle = reinterpret_cast<std::uint64_t>(mine.get());
  REQUIRE(handle != rt.stream());

  const Driver& d = Driver::get();
  KT_CHECK_CU(d.cuStreamBeginCapture(mine.get(), CU_STREAM_CAPTURE_MODE_RELAXED));
  run.kernel.launch(run.buffers(), handle);
  CUgraph graph = nullptr;
  KT_CHECK_CU(d.cuStreamEndCapture(mine.get(), &graph));
  std::size_t nodes = 0;
  KT_CHECK_CU(d.cuGraphGetNodes(graph, nullptr, &nodes));
  KT_CHECK_CU(d.cuGraphDestroy(graph));
  CHECK(nodes == 1);
  rt.synchronize();
  auto z = run.z();
  CHECK(std::isnan(z.front()));
  CHECK(std::isnan(z.back()));

  run.kernel.launch(run.buffers(), handle);
  mine.synchronize();
  z = run.z();
  for (std::int64_t i = 0; i < run.n; ++i) {
    INFO("element " << i);
    REQUIRE(z[i] == run.x[i] + run.y[i]);
  }
}

TEST_CASE("spec gpu: a Runtime's kernels, memory and copies serve a thread other than the one that made it",
          "[gpu][spec]") {
  ktune::test::skip_without_gpu();
  ktune::Runtime rt("gpu");
  std::vector<float> x, y, z;
  std::string error;
  std::thread other([&] {
    try {  // the runtime's first kernel (compiled or loaded here), its memory, the copies and a launch
      ktune::test::VectorAddRun run{rt, 4099};
      run.poison_z();
      run.kernel.launch(run.buffers());
      rt.synchronize();
      x = run.x, y = run.y, z = run.z();
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  other.join();
  REQUIRE(error.empty());
  REQUIRE(z.size() == 4099);
  for (std::size_t i = 0; i < z.size(); ++i) {
    INFO("element " << i);
    REQUIRE(z[i] == x[i] + y[i]);
  }
}

TEST_CASE("spec gpu: a kernel whose compile the binary cache cannot keep runs and says why", "[gpu][spec]") {
  ktune::test::skip_without_gpu();
  const auto dir = ktune::test::scratch_dir("spec-gpu-unwritable-cubin");
  std::ofstream(dir / "cubin") << "a file where the cache's folder would be";
  {
    const ktune::test::ScopedEnv cache_dir("KTUNE_CACHE_DIR", dir.c_str());
    ktune::Runtime rt("gpu");
    ktune::test::VectorAddRun run{rt, 2053};
    CHECK_FALSE(run.kernel.not_stored().empty());
    run.poison_z();
    run.kernel.launch(run.buffers());
    rt.synchronize();
    const auto z = run.z();
    for (std::int64_t i = 0; i < run.n; ++i) REQUIRE(z[i] == run.x[i] + run.y[i]);
  }
  // Where it can be written, the compile is kept, and then loaded from there.
  std::filesystem::remove(dir / "cubin");
  const ktune::test::ScopedEnv cache_dir("KTUNE_CACHE_DIR", dir.c_str());
  for (int run_number = 0; run_number < 2; ++run_number) {
    ktune::Runtime rt("gpu");
    ktune::test::VectorAddRun run{rt, 2053};
    CHECK(run.kernel.not_stored().empty());
  }
}

TEST_CASE("spec gpu: Runtime::tune measures on the device and its winner runs", "[gpu][spec]") {
  ktune::test::skip_without_gpu();
  const auto dir = ktune::test::scratch_dir("spec-gpu-tune");
  const std::string spec =
      (std::filesystem::path(KTUNE_SOURCE_DIR) / "examples/vector_add/vector_add.json").string();
  ktune::Runtime rt("gpu");
  ktune::TuneSettings how;
  how.budget = "4";
  how.cache_file = (dir / "tuned.json").string();
  const ktune::Kernel k = rt.tune(spec, {"f32", {{"n", 10007}}}, how);
  CHECK(k.match() == ktune::Match::kExact);
  CHECK_THAT(k.reason(), Catch::StartsWith("exact (tuned now: 4 configs measured"));
  CHECK(std::filesystem::exists(how.cache_file));
  ktune::test::VectorAddRun run{rt, 10007};  // the same request: the tuned kernel
  CHECK(run.kernel.config() == k.config());
  run.poison_z();
  run.kernel.launch(run.buffers());
  rt.synchronize();
  const auto z = run.z();
  for (std::int64_t i = 0; i < run.n; ++i) REQUIRE(z[i] == run.x[i] + run.y[i]);
  // Too small for z: refused before the kernel could write past it.
  const std::uint64_t small = rt.allocate(100);
  CHECK_THROWS_WITH(run.kernel.launch({run.dx, run.dy, small}), Catch::Contains("needs 40028 bytes"));
  std::vector<float> part(7);
  rt.download(part.data(), run.dz + 10000 * 4, part.size() * 4);
  for (std::size_t i = 0; i < part.size(); ++i) REQUIRE(part[i] == run.x[10000 + i] + run.y[10000 + i]);
}

TEST_CASE("spec gpu: a built-in family's run-time parameters take their values at each launch", "[gpu][spec]") {
  ktune::test::skip_without_gpu();
  ktune::Runtime rt("gpu");
  // The device's exp, sqrt and division round otherwise than the host's: within 1e-4 of the references.
  ktune::test::check_family_parameters(rt, 1e-4);
}

}  // namespace spec_runtime_gpu_test
