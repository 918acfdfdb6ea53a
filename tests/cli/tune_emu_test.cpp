// `ktune tune` through the emulation backend, once per strategy: the whole
// command line (argument checks, session, winner, cache) works with each.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "search/strategy.hpp"
#include "support.hpp"

using ktune::test::ktune_exe;
using ktune::test::run_command;

TEST_CASE("CLI: ktune tune runs with every strategy and writes the winner", "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-tune");
  for (const auto& strategy : ktune::search::strategy_names()) {
    INFO(strategy);
    const auto cache = dir / (strategy + ".json");
    std::string out;
    const int rc = run_command(ktune_exe().string() +
                                   " tune --backend emu --family swiglu_fwd"
                                   " --problem '{\"dtype\":\"f32\",\"dims\":{\"n\":1000}}' --budget 3 --strategy " +
                                   strategy + " --cache " + cache.string(),
                               &out);
    INFO(out);
    REQUIRE(rc == 0);
    CHECK_THAT(out, Catch::Contains("winner written to"));
    // Not a terminal: whole progress lines, never carriage-return updates.
    CHECK(out.find('\r') == std::string::npos);
    CHECK_THAT(out, Catch::Contains(" evaluated of "));
    std::ifstream in(cache);
    const auto j = nlohmann::json::parse(in);
    CHECK(j.dump().find("swiglu_fwd") != std::string::npos);
  }
  std::string out;
  CHECK(run_command(ktune_exe().string() +
                        " tune --backend emu --family swiglu_fwd --problem '{\"dtype\":\"f32\",\"dims\":{\"n\":1000}}'"
                        " --strategy hill --cache " + (dir / "none.json").string(),
                    &out) == 2);
  CHECK_THAT(out, Catch::Contains("unknown strategy 'hill'; known: "));
  CHECK_FALSE(std::filesystem::exists(dir / "none.json"));
}

TEST_CASE("CLI: ktune tune --model tunes every kernel one training step needs", "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-tune-model");
  const auto cache = dir / "tiny.json";
  std::string out;
  const int rc = run_command(ktune_exe().string() + " tune --backend emu --model tiny --ctx 16 --batch 2 --budget 1 "
                                                    "--cache " + cache.string(),
                             &out);
  INFO(out);
  REQUIRE(rc == 0);
  std::ifstream in(cache);
  const auto j = nlohmann::json::parse(in);
  std::set<std::string> families;
  for (const auto& e : j["entries"]) families.insert(e["key"]["family"].get<std::string>());
  for (const char* f : {"rmsnorm_fwd", "rmsnorm_bwd", "swiglu_fwd", "swiglu_bwd", "rope_fwd", "rope_bwd",
                        "attention_fwd", "attention_bwd", "embedding_fwd", "embedding_bwd",
                        "cross_entropy_fwd", "cross_entropy_bwd", "adamw"})
    CHECK(families.count(f) == 1);
  CHECK_THAT(out, Catch::Contains("13 winners written to"));

  CHECK(run_command(ktune_exe().string() + " tune --backend emu --model tiny --family swiglu_fwd --cache " +
                        (dir / "none.json").string(),
                    &out) == 2);
  CHECK_THAT(out, Catch::Contains("give either --family with --problem, or --model"));
  CHECK_FALSE(std::filesystem::exists(dir / "none.json"));
}
