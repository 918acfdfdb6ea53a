// `ktune bench precision --backend emu`: seeds 003 and 004's accumulation
// table, markdown and JSON; bad input refused in one line, nothing written.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support.hpp"

namespace cli_bench_precision_emu_test {

using ktune::test::ktune_exe;
using ktune::test::run_command;

TEST_CASE("CLI: bench precision --backend emu prints the seeds' accumulation table", "[cli][emu]") {
  const auto dir = ktune::test::scratch_dir("bench_precision");
  const std::string json = (dir / "precision.json").string();
  const std::string bench = ktune_exe().string() + " bench precision --backend emu ";
  std::string out;
  REQUIRE(run_command(bench + "--json-out " + json, &out) == 0);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("1000 additions of 0.01"));
  CHECK_THAT(out, Catch::Contains("| f16 | f16 | 0.01000213623 | 9.95312 |"));
  CHECK_THAT(out, Catch::Contains("| bf16 | bf16 | 0.01000976562 | 4 |"));
  std::ifstream in(json);
  const auto j = nlohmann::json::parse(in);
  CHECK(j["benchmark"] == "precision");
  CHECK(j["count"] == 1000);
  CHECK(j["exact"].get<double>() == Approx(10.0));
  REQUIRE(j["rows"].size() == 5);
  CHECK(j["rows"][2]["sum_dtype"] == "f32");
  CHECK(j["rows"][2]["addend_dtype"] == "f16");

  // --json gives the same report on stdout.
  REQUIRE(run_command(ktune_exe().string() + " --json bench precision --backend emu --count 7 --value 0.5", &out) ==
          0);
  CHECK(nlohmann::json::parse(out)["rows"][0]["sum"].get<double>() == 3.5);

  // Bad input: one line, exit 2, nothing written.
  const std::string refused = (dir / "refused.json").string();
  for (const std::string args : {"--count 0", "--count 2e9", "--value inf", "--value 1e39", "--backend cpu"}) {
    INFO(args);
    REQUIRE(run_command(bench + args + " --json-out " + refused, &out) == 2);
    CHECK(std::count(out.begin(), out.end(), '\n') == 1);
    CHECK_FALSE(std::filesystem::exists(refused));
  }
}

}  // namespace cli_bench_precision_emu_test
