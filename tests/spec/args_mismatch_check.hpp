// A kernel spec whose args are not its kernel's parameters, run on a backend
// (`ktune run --backend B`): examples/vector_add as given runs; with n left
// out, passed as 8 bytes, or passed as a float, each is named before the
// launch, not read as other bytes. Shared by the emu and gpu tests.
#pragma once
#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "support.hpp"

namespace ktune::test {

inline void check_args_mismatch(const std::string& backend, const std::string& folder) {
  namespace fs = std::filesystem;
  const auto dir = scratch_dir(folder);
  const fs::path example = fs::path(KTUNE_SOURCE_DIR) / "examples/vector_add";
  fs::copy_file(example / "vector_add.cu", dir / "vector_add.cu", fs::copy_options::overwrite_existing);
  nlohmann::json spec = nlohmann::json::parse(std::ifstream(example / "vector_add.json"));
  const std::string run =
      ktune_exe().string() + " run --backend " + backend + " --spec " + (dir / "vector_add.json").string() + " 2>&1";
  std::string out;
  const auto run_with = [&](const nlohmann::json& args) {
    spec["args"] = args;
    std::ofstream(dir / "vector_add.json") << spec.dump();
    return run_command(run, &out);
  };
  CHECK(run_with(spec["args"]) == 0);  // as the example gives them
  INFO(out);
  CHECK(run_with({"x", "y", "z"}) != 0);  // n left out
  CHECK_THAT(out, Catch::Contains(": kernel vector_add<") &&
                      Catch::Contains("takes 4 parameters of 8, 8, 8, 4 bytes; the launch passes 3 arguments of 8, 8, "
                                      "8 bytes"));
  CHECK(run_with({"x", "y", "z", {{"type", "i64"}, {"value", "n"}}}) != 0);  // 8 bytes where the kernel takes an int
  CHECK_THAT(out, Catch::Contains("the launch passes 4 arguments of 8, 8, 8, 8 bytes"));
  CHECK(run_with({"x", "y", "z", {{"type", "f32"}, {"value", "n"}}}) != 0);  // the same 4 bytes, other bits
  CHECK_THAT(out, Catch::Contains("takes an integer as parameter 4; the launch passes a floating-point number"));
}

}  // namespace ktune::test
