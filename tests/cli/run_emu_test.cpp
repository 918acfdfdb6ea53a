// `ktune run` on the emulation: what it says of each checked buffer.
#include <catch2/catch.hpp>

#include <string>

#include <nlohmann/json.hpp>

#include "support.hpp"

namespace cli_run_emu_test {

using ktune::test::ktune_exe;
using ktune::test::run_command;

TEST_CASE("CLI: run says the RMS error of a buffer that passes by its atol where its relative error is infinite",
          "[cli]") {
  // One key: the softmax's gradient is zero, so dQ's and dK's answers are all zeros and their relative L2
  // error infinite; they pass by their atol, which the run says beside it.
  const std::string run = ktune_exe().string() +
                          " run --backend emu --family attention_bwd --problem '{\"dtype\":\"f32\",\"dims\":"
                          "{\"batch\":1,\"heads\":1,\"seq\":1,\"head_dim\":64,\"causal\":1}}'";
  std::string out;
  REQUIRE(run_command(run, &out) == 0);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("PASS"));
  for (const std::string buffer : {"dq", "dk"}) {
    const auto line = out.substr(out.find("  " + buffer + " "));
    CHECK_THAT(line.substr(0, line.find('\n')), Catch::Contains("relative L2 error inf, RMS error "));
    CHECK_THAT(line.substr(0, line.find('\n')), Catch::Contains("(atol "));
  }
  REQUIRE(run_command(ktune_exe().string() + " --json" + run.substr(ktune_exe().string().size()), &out) == 0);
  const auto at = out.find("{\"");
  REQUIRE(at != std::string::npos);
  const auto j = nlohmann::json::parse(out.substr(at, out.find('\n', at) - at));
  for (const std::string buffer : {"dq", "dk"}) {
    INFO(buffer);
    REQUIRE(j.at("rms_errors").contains(buffer));
    const double rms = j["rms_errors"][buffer].at("rms").get<double>();
    const double atol = j["rms_errors"][buffer].at("atol").get<double>();
    CHECK(atol > 0);
    CHECK(rms <= atol);
    CHECK(j.at("errors").at(buffer).is_null());  // infinite: JSON has no infinity
  }
}

}  // namespace cli_run_emu_test
