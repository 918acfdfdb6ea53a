// The C++ run-time API as a user gets it: `cmake --install` the build,
// build examples/runtime against the installed package (find_package(ktune),
// ktune::ktune), and run it emulated: the default config without a cache,
// the exact entry once `ktune tune` has filled one.
#include <catch2/catch.hpp>

#include <filesystem>

#include "spec/vector_add_run.hpp"
#include "support.hpp"

namespace spec_runtime_emu_test {

namespace fs = std::filesystem;
using ktune::test::run_command;

TEST_CASE("spec emu: the runtime example builds against the installed package and runs", "[spec]") {
  const auto dir = ktune::test::scratch_dir("spec-install");
  const fs::path source(KTUNE_SOURCE_DIR), binary(KTUNE_BINARY_DIR);
  const std::string spec = (source / "examples/matmul/matmul.json").string();
  std::string out;
  REQUIRE(run_command("cmake --install " + binary.string() + " --prefix " + (dir / "prefix").string(), &out) == 0);
  CHECK(fs::exists(dir / "prefix/include/ktune/ktune.hpp"));
  INFO(out);
  REQUIRE(run_command("cmake -S " + (source / "examples/runtime").string() + " -B " + (dir / "build").string() +
                          " -DCMAKE_PREFIX_PATH=" + (dir / "prefix").string() + " && cmake --build " +
                          (dir / "build").string(),
                      &out) == 0);
  const std::string example = (dir / "build/matmul_example").string();

  REQUIRE(run_command(example + " emu " + spec, &out) == 0);
  CHECK_THAT(out, Catch::Contains("tiled_matmul on "));
  CHECK_THAT(out, Catch::Contains("config {\"tile\":16,\"wpt\":2}, default"));
  CHECK_THAT(out, Catch::Contains(": PASS"));

  const std::string cache = (dir / "tuned.json").string();
  REQUIRE(run_command(ktune::test::ktune_exe().string() + " tune --backend emu --budget 3 --spec " + spec +
                          " --cache " + cache,
                      &out) == 0);
  REQUIRE(run_command(example + " emu " + spec + " " + cache, &out) == 0);
  CHECK_THAT(out, Catch::Contains(", exact"));
  CHECK_THAT(out, Catch::Contains(": PASS"));

  CHECK(run_command(example + " emu " + (dir / "missing.json").string(), &out) == 2);
  CHECK_THAT(out, Catch::Contains("no such spec file"));
}

TEST_CASE("spec emu: Kernel::launch on a caller's stream runs at once under the emulation", "[spec]") {
  ktune::Runtime rt("emu");
  CHECK(rt.stream() == 0);
  ktune::test::VectorAddRun run{rt, 1031};
  for (const std::uint64_t stream : {std::uint64_t{0}, std::uint64_t{0x1234}}) {
    INFO("stream " << stream);
    run.poison_z();
    run.kernel.launch(run.buffers(), stream);
    const auto z = run.z();
    for (std::int64_t i = 0; i < run.n; ++i) REQUIRE(z[i] == run.x[i] + run.y[i]);
  }
}

}  // namespace spec_runtime_emu_test
