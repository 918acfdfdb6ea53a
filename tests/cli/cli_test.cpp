// The ktune executable: bad input gets one clear line and a non-zero exit,
// nothing is written; render prints text that nvcc compiles alone.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "support.hpp"

using ktune::test::ktune_exe;
using ktune::test::run_command;

namespace {
int run_ktune(const std::string& args, std::string* out) { return run_command(ktune_exe().string() + " " + args, out); }
}  // namespace

TEST_CASE("CLI: bad input is one line naming what is accepted, exit 2", "[cli]") {
  std::string out;
  CHECK(run_ktune("render --family nope", &out) == 2);
  CHECK_THAT(out, Catch::Contains("unknown family 'nope'") && Catch::Contains("adamw"));
  CHECK(run_ktune("render --family adamw --config '{\"threads\": 256'", &out) == 2);
  CHECK_THAT(out, Catch::Contains("--config is not valid JSON"));
  CHECK(run_ktune("render --family adamw --config '{\"threads\": 100}'", &out) == 2);
  CHECK_THAT(out, Catch::Contains("{128, 256, 512, 1024}"));
  CHECK(run_ktune("render --family adamw --config '{\"warps\": 4}'", &out) == 2);
  CHECK_THAT(out, Catch::Contains("unknown parameter 'warps'"));
  CHECK(run_ktune("compile --arch sm_99", &out) == 2);
  CHECK_THAT(out, Catch::Contains("unknown architecture 'sm_99'") && Catch::Contains("sm_90"));
  CHECK(run_ktune("render --family adamw --problem '{\"dtype\":\"f64\",\"dims\":{\"tensors\":1,\"numel\":4}}'", &out) == 2);
  CHECK_THAT(out, Catch::Contains("accepted: f32"));
  CHECK(run_ktune("bench adam --tensors 1,x", &out) == 2);
  CHECK(run_ktune("frobnicate", &out) == 2);
}

TEST_CASE("CLI: without a device, GPU commands say so in one line and exit 2", "[cli]") {
  std::string out;
  CHECK(run_command("KTUNE_NO_DEVICE=1 " + ktune_exe().string() + " devices", &out) == 2);
  CHECK_THAT(out, Catch::StartsWith("no CUDA device: "));
  const auto dir = ktune::test::scratch_dir("cli");
  const auto cache = (dir / "tuned.json").string();
  CHECK(run_command("KTUNE_NO_DEVICE=1 " + ktune_exe().string() +
                        " tune --family adamw --problem '{\"dtype\":\"f32\",\"dims\":{\"tensors\":1,\"numel\":64}}' "
                        "--cache " + cache, &out) == 2);
  CHECK_THAT(out, Catch::Contains("no CUDA device: "));
  CHECK_FALSE(std::filesystem::exists(cache));  // nothing written
  CHECK(run_command("KTUNE_NO_DEVICE=1 " + ktune_exe().string() + " bench adam", &out) == 2);
}

TEST_CASE("CLI: --help tells every subcommand", "[cli]") {
  std::string out;
  CHECK(run_ktune("--help", &out) == 0);
  for (const char* cmd : {"devices", "render", "compile", "tune", "bench"}) CHECK_THAT(out, Catch::Contains(cmd));
  CHECK(run_ktune("compile --help", &out) == 0);
  CHECK_THAT(out, Catch::Contains("--all"));
}

TEST_CASE("CLI: render prints self-contained source that nvcc compiles alone", "[cli]") {
  std::string out;
  REQUIRE(run_ktune("render --family adamw --config '{\"threads\":256,\"vec\":2}'", &out) == 0);
  CHECK_THAT(out, Catch::Contains("adamw::adamw_multi_tensor<256, 2, 64, false>"));
  const char* nvcc = "/usr/local/cuda/bin/nvcc";
  if (!std::filesystem::exists(nvcc)) {
    WARN("no nvcc at " << nvcc << ": the standalone compile is not checked");
    return;
  }
  const auto dir = ktune::test::scratch_dir("render");
  std::ofstream(dir / "k.cu") << out;
  std::string log;
  CHECK(run_command(std::string(nvcc) + " -arch=sm_90 -std=c++17 -c " + (dir / "k.cu").string() + " -o " +
                        (dir / "k.o").string(), &log) == 0);
  INFO(log);
}

TEST_CASE("CLI: compile prints the resource table and summary", "[cli]") {
  std::string out;
  REQUIRE(run_ktune("compile --family adamw_single --arch sm_80", &out) == 0);
  CHECK_THAT(out, Catch::Contains("compiled 2 variants") && Catch::Contains("0 failures"));
  CHECK_THAT(out, Catch::Contains("| adamw_single"));
  REQUIRE(run_ktune("--json compile --family adamw_eager --arch sm_90", &out) == 0);
  const auto j = nlohmann::json::parse(out.substr(out.find('{')));
  CHECK(j["failures"] == 0);
}
