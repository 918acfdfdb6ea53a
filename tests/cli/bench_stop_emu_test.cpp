// `ktune bench` stopped by a signal (GNU timeout's SIGTERM, ^C): it ends
// after the measurement under way and writes its markdown and JSON with the
// rows measured so far, marked incomplete, then exits with 128 + the signal.
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>

#include "base/files.hpp"
#include "support.hpp"

namespace cli_bench_stop_emu_test {

using ktune::test::ktune_exe;
using ktune::test::run_command;

nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

/// Runs `args` in the background (stdout to dir/out.md, stderr to dir/err), waits until stderr holds `when`,
/// sends `signal`, and returns the exit status.
int run_stopped(const std::filesystem::path& dir, const std::string& args, const std::string& when,
                const std::string& signal) {
  const std::string out = (dir / "out.md").string(), err = (dir / "err").string();
  std::string output;
  return run_command("(" + ktune_exe().string() + " " + args + " > " + out + " 2> " + err + " & pid=$!; " +
                         ktune::test::wait_while_running("grep -q -- '" + when + "' " + err + " 2>/dev/null", "0.05") +
                         "kill -" + signal + " $pid; wait $pid)",
                     &output);
}

TEST_CASE("CLI: bench adam stopped by SIGTERM writes the rows measured, marked incomplete, and exits 143",
          "[cli][emu]") {
  const auto dir = ktune::test::scratch_dir("bench_stop_adam");
  const auto json = dir / "adam.json";
  // 40 rows: many seconds of the emulation, stopped once the first is measured.
  const int code = run_stopped(dir,
                               "bench adam --backend emu --tensors 1,2,3,4,5,6,7,8 --numel 1000,2000,3000,4000,5000 "
                               "--json-out " + json.string(),
                               "  1 x 1000: eager", "TERM");
  const std::string err = ktune::read_file(dir / "err"), md = ktune::read_file(dir / "out.md");
  INFO(err);
  CHECK(code == 128 + 15);
  REQUIRE(std::filesystem::exists(json));
  const auto j = read_json(json);
  CHECK(j["complete"] == false);
  CHECK(j["stopped_by"] == "SIGTERM");
  CHECK(j["rows_planned"] == 40);
  CHECK(j["rows"].size() >= 1);
  CHECK(j["rows"].size() < 40);
  CHECK(j["rows_measured"] == j["rows"].size());
  CHECK_THAT(md, Catch::Contains("| 1 | 1000 |") &&
                     Catch::Contains("**Incomplete:** stopped by SIGTERM after " +
                                     std::to_string(j["rows"].size()) + " of 40 rows"));
  CHECK_THAT(err, Catch::Contains("stopping after the measurement under way") &&
                      Catch::Contains("stopped by SIGTERM after"));
}

TEST_CASE("CLI: bench e2e --sweep stopped by SIGINT writes the runs finished, marked incomplete, and exits 130",
          "[cli][emu]") {
  const auto dir = ktune::test::scratch_dir("bench_stop_sweep");
  const auto json = dir / "sweep.json";
  const int code = run_stopped(dir,
                               "bench e2e --model tiny,small,medium --vocab 128 --d-model 32 --d-ff 64 --layers 1 "
                               "--heads 2 --threads 1 --sweep --json-out " + json.string(),
                               "\\[3/36\\]", "INT");
  const std::string err = ktune::read_file(dir / "err"), md = ktune::read_file(dir / "out.md");
  INFO(err);
  CHECK(code == 128 + 2);
  REQUIRE(std::filesystem::exists(json));
  const auto rows = read_json(json);
  REQUIRE(rows.is_array());
  CHECK(rows.size() >= 2);
  CHECK(rows.size() < 36);
  for (const auto& r : rows) {
    CHECK(r["complete"] == true);  // each row a whole run: the run cut short is none
    CHECK(r["sweep"]["complete"] == false);
    CHECK(r["sweep"]["stopped_by"] == "SIGINT");
    CHECK(r["sweep"]["rows_planned"] == 36);
    CHECK(r["sweep"]["rows_measured"] == rows.size());
  }
  CHECK_THAT(md, Catch::Contains("**Incomplete:** stopped by SIGINT after " + std::to_string(rows.size()) +
                                 " of 36 runs") &&
                     Catch::Contains("### Summary statistics") &&
                     Catch::Contains("| count | " + std::to_string(rows.size()) + " |"));
}

TEST_CASE("CLI: bench e2e stopped by SIGTERM writes the trials measured, marked incomplete, and exits 143",
          "[cli][emu]") {
  const auto dir = ktune::test::scratch_dir("bench_stop_e2e");
  const auto json = dir / "e2e.json";
  // The progress line (on stderr, the first at once) names the step done: stopped after a later one.
  const int code = run_stopped(dir,
                               "bench e2e --model tiny --threads 1 --ctx 8 --batch 1 --warmup 0 --trials 100000 "
                               "--json-out " + json.string(),
                               "step 1 of 100000", "TERM");
  const std::string err = ktune::read_file(dir / "err"), md = ktune::read_file(dir / "out.md");
  INFO(err);
  CHECK(code == 128 + 15);
  REQUIRE(std::filesystem::exists(json));
  const auto j = read_json(json);
  CHECK(j["complete"] == false);
  CHECK(j["stopped_by"] == "SIGTERM");
  CHECK(j["num_trials_planned"] == 100000);
  const int trials = j["num_trials"];
  CHECK(trials >= 1);
  CHECK(trials < 100000);
  CHECK(j["forward"]["mean_ms"].get<double>() > 0);
  CHECK_THAT(md, Catch::Contains("**Incomplete:** stopped by SIGTERM after " + std::to_string(trials) +
                                 " of 100000 trials"));
}

TEST_CASE("CLI: bench e2e stopped in its warm-up writes nothing, and says so", "[cli][emu]") {
  const auto dir = ktune::test::scratch_dir("bench_stop_e2e_warmup");
  const auto json = dir / "e2e.json";
  const int code = run_stopped(dir,
                               "bench e2e --model tiny --threads 1 --ctx 8 --batch 1 --warmup 100000 --trials 5 "
                               "--json-out " + json.string(),
                               "step 1 of 100005", "TERM");
  const std::string err = ktune::read_file(dir / "err"), md = ktune::read_file(dir / "out.md");
  INFO(err);
  CHECK(code == 128 + 15);
  CHECK_FALSE(std::filesystem::exists(json));
  CHECK(md.empty());
  CHECK_THAT(err, Catch::Contains("stopped by SIGTERM after 0 of 5 trials; nothing is written") &&
                      !Catch::Contains("the report says"));
}

TEST_CASE("CLI: bench attention stopped by SIGHUP writes the rows measured, marked incomplete", "[cli][emu]") {
  const auto dir = ktune::test::scratch_dir("bench_stop_attention");
  const auto json = dir / "attention.json";
  const int code = run_stopped(dir,
                               "bench attention --backend emu --dims 16 --seqs 8,9,10,11,12,13,14,15,16,17,18,19 "
                               "--json-out " + json.string(),
                               "seed003 f32;batch=8;causal=0;head_dim=16;heads=1;seq=8: forward", "HUP");
  const std::string err = ktune::read_file(dir / "err"), md = ktune::read_file(dir / "out.md");
  INFO(err);
  CHECK(code == 128 + 1);
  REQUIRE(std::filesystem::exists(json));
  const auto j = read_json(json);
  CHECK(j["complete"] == false);
  CHECK(j["stopped_by"] == "SIGHUP");
  CHECK(j["rows_planned"] == 12);
  CHECK(j["rows"].size() >= 1);
  CHECK(j["rows"].size() < 12);  // the rows not reached are left out
  CHECK_THAT(md, Catch::Contains("**Incomplete:** stopped by SIGHUP after"));
}

}  // namespace cli_bench_stop_emu_test
