// Kernel specs on a GPU: args that are not the kernel's parameters are named
// before the launch (the driver's parameter sizes and the kinds the kernel's
// mangled name gives, as the emulation's), not read as other bytes. Skipped
// without a device.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "support.hpp"

namespace spec_spec_gpu_test {

namespace fs = std::filesystem;
using ktune::test::ktune_exe;
using ktune::test::run_command;

TEST_CASE("spec gpu: args that are not the kernel's parameters are named, not read as other bytes", "[gpu][spec]") {
  ktune::test::skip_without_gpu();
  const auto dir = ktune::test::scratch_dir("spec-gpu-args-mismatch");
  const fs::path example = fs::path(KTUNE_SOURCE_DIR) / "examples/vector_add";
  fs::copy_file(example / "vector_add.cu", dir / "vector_add.cu");
  nlohmann::json spec = nlohmann::json::parse(std::ifstream(example / "vector_add.json"));
  const std::string run = ktune_exe().string() + " run --backend gpu --spec " + (dir / "vector_add.json").string();
  std::string out;
  CHECK(run_command(run + " 2>&1", &out) == 0);  // as the example gives them
  INFO(out);
  spec["args"] = {"x", "y", "z"};  // n left out
  std::ofstream(dir / "vector_add.json") << spec.dump();
  CHECK(run_command(run + " 2>&1", &out) != 0);
  CHECK_THAT(out, Catch::Contains("GPU: kernel vector_add<") &&
                      Catch::Contains("takes 4 parameters of 8, 8, 8, 4 bytes; the launch passes 3 arguments of 8, 8, "
                                      "8 bytes"));
  spec["args"] = {"x", "y", "z", {{"type", "i64"}, {"value", "n"}}};  // n as 8 bytes, where the kernel takes an int
  std::ofstream(dir / "vector_add.json") << spec.dump();
  CHECK(run_command(run + " 2>&1", &out) != 0);
  CHECK_THAT(out, Catch::Contains("the launch passes 4 arguments of 8, 8, 8, 8 bytes"));
  spec["args"] = {"x", "y", "z", {{"type", "f32"}, {"value", "n"}}};  // n as a float: the same 4 bytes, other bits
  std::ofstream(dir / "vector_add.json") << spec.dump();
  CHECK(run_command(run + " 2>&1", &out) != 0);
  CHECK_THAT(out, Catch::Contains("takes an integer as parameter 4; the launch passes a floating-point number"));
}

}  // namespace spec_spec_gpu_test
