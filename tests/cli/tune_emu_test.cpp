// `ktune tune` through the emulation backend, once per strategy: the whole
// command line (argument checks, session, winner, cache) works with each.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/files.hpp"
#include "search/strategy.hpp"
#include "support.hpp"
#include "templates/family.hpp"

namespace cli_tune_emu_test {

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
    // Counted against what a search can measure, beside the whole space.
    const std::uint64_t points = ktune::templates::find_family("swiglu_fwd").space().size();
    CHECK_THAT(out, Catch::Contains(" valid configs (" + std::to_string(points) + " points), "));
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

TEST_CASE("CLI: a shard that did not measure the cache's config keeps its faster entry, and says why", "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-tune-shard-keeps");
  const auto cache = dir / "tuned.json";
  const std::string problem = R"('{"dtype":"f32","dims":{"rows":4,"dim":32}}')";
  const std::string tune = ktune_exe().string() + " tune --backend emu --family rmsnorm_fwd --problem " + problem +
                           " --budget 2 --cache " + cache.string() + " --log ";
  const std::string first_log = (dir / "first.log").string();
  std::string out;
  REQUIRE(run_command(tune + first_log, &out) == 0);
  // The entry's config becomes another valid one, measured (by hand) far faster than anything here.
  const auto& family = ktune::templates::find_family("rmsnorm_fwd");
  const ktune::templates::Problem p{"f32", {{"rows", 4}, {"dim", 32}}};
  const auto device = ktune::DeviceLimits::for_arch("sm_90");
  std::optional<ktune::Config> other;
  for (std::uint64_t i = 0; i < family.space().size() && !other; ++i)
    if (const auto c = family.space().at(i); c != family.default_config(p) && family.is_valid(c, p, device))
      other = c;
  REQUIRE(other);
  auto j = nlohmann::json::parse(ktune::read_file(cache));
  auto& entry = j.at("entries").at(0);
  entry["config"] = other->to_json();
  entry["time_ms"] = 1e-6;
  entry["p20_ms"] = 0.9e-6;
  entry["p80_ms"] = 1.1e-6;
  entry["evaluations"] = 500;
  ktune::write_file_atomic(cache, j.dump(1));
  const std::string shard = " --shard " + std::to_string(1 - *family.space().index_of(*other) % 2) + "/2";
  // A shard's session does not resume the whole space's log, whose results are not all its own.
  REQUIRE(run_command(tune + first_log + " --resume" + shard, &out) == 2);
  CHECK_THAT(out, Catch::Contains("holds results of shard \"0/1\""));
  // The shard that does not hold the cache's config never measures it: the entry stays, as it was.
  REQUIRE(run_command(tune + (dir / "shard.log").string() + shard, &out) == 0);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("which this session did not measure (it stopped first, or the config lies in "
                                  "another shard); it is kept"));
  CHECK_THAT(out, Catch::Contains("0 winners written to"));
  const auto kept = nlohmann::json::parse(ktune::read_file(cache)).at("entries").at(0);
  CHECK(kept.at("config") == other->to_json());
  CHECK(kept.at("time_ms") == 1e-6);
  CHECK(kept.at("evaluations") == 500);
}

TEST_CASE("CLI: tune takes the warm-up and repetition counts of its measurements", "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-tune-repetitions");
  std::string out;
  const std::string tune = "{ " + ktune_exe().string() +
                           " --json tune --backend emu --family swiglu_fwd --problem "
                           "'{\"dtype\":\"f32\",\"dims\":{\"n\":1000}}' --budget 2 --cache " +
                           (dir / "c.json").string() + " --log " + (dir / "s.log").string();
  REQUIRE(run_command(tune + " --warmup 0 --repetitions 2 2>/dev/null; }", &out) == 0);
  const auto j = nlohmann::json::parse(out);
  // The winner, timed again beside the default in two passes of one repetition each.
  CHECK_THAT(j.at("method").get<std::string>(),
             Catch::Contains("2 repetitions in all; each pass: ") && Catch::Contains("(0 warm-ups, 1 repetition;"));
  CHECK(run_command(tune + " --repetitions 0 2>&1; }", &out) == 2);
  CHECK_THAT(out, Catch::Contains("--repetitions: must be an integer in 1..100000, got '0'"));
  // The session as a Kernel Tuner cache file, whose name says it is one; another name is refused before the run.
  const std::string resumed = "{ " + ktune_exe().string() +
                              " tune --backend emu --family swiglu_fwd --problem '{\"dtype\":\"f32\",\"dims\":{"
                              "\"n\":1000}}' --budget 3 --resume --cache " +
                              (dir / "c.json").string() + " --log " + (dir / "s.log").string();
  REQUIRE(run_command(resumed + " --export-kt " + (dir / "kt.json").string() + " 2>/dev/null; }", &out) == 0);
  const auto kt = nlohmann::json::parse(std::ifstream(dir / "kt.json"));
  CHECK(kt.at("cache").size() >= 3);
  CHECK(run_command(resumed + " --export-kt " + (dir / "kt.txt").string() + " 2>&1; }", &out) == 2);
  CHECK_THAT(out, Catch::Contains("a Kernel Tuner cache file is .json or .json.gz"));
  CHECK_FALSE(std::filesystem::exists(dir / "kt.txt"));
  // An earlier export is replaced; a file that is no Kernel Tuner cache (the tuned cache) is refused, kept whole.
  REQUIRE(run_command(resumed + " --export-kt " + (dir / "kt.json").string() + " 2>/dev/null; }", &out) == 0);
  std::filesystem::copy_file(dir / "c.json", dir / "other.json");
  const std::string cache_text = ktune::read_file(dir / "other.json");
  CHECK(run_command(resumed + " --export-kt " + (dir / "other.json").string() + " 2>&1; }", &out) == 2);
  CHECK_THAT(out, Catch::Contains("the file is there and no Kernel Tuner cache") &&
                      Catch::Contains("the export would replace it"));
  CHECK(ktune::read_file(dir / "other.json") == cache_text);
}

TEST_CASE("CLI: tune measures a spec's candidates after its default and marks them in its table", "[cli]") {
  // examples/matmul lists 32x32 tiles (not valid where n = 48: skipped) and 16x16 tiles with 4 outputs a thread.
  const auto dir = ktune::test::scratch_dir("cli-tune-candidates");
  const std::string log = (dir / "session.log").string();
  std::string out;
  REQUIRE(run_command(ktune_exe().string() + " tune --backend emu --spec " + KTUNE_SOURCE_DIR +
                          "/examples/matmul/matmul.json --budget 3 --cache " + (dir / "tuned.json").string() +
                          " --log " + log,
                      &out) == 0);
  INFO(out);
  std::vector<std::string> measured;
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("config")) measured.push_back(j["config"].dump());
  }
  REQUIRE(measured.size() == 3);
  CHECK(measured[0] == "{\"tile\":16,\"wpt\":2}");
  CHECK(measured[1] == "{\"tile\":16,\"wpt\":4}");
  CHECK_THAT(out, Catch::Contains("| candidate") || Catch::Contains(", candidate"));
}

TEST_CASE("CLI: run and tune with a binary cache that cannot be written stand, and say once at their end what was "
          "not kept", "[cli][once]") {
  // A spec is compiled with NVRTC under the emulation too: in the process (run), in a worker (tune, and run
  // --timeout). The cache's cubin folder taken by a file, as a read-only mount or a full disk; emu/ is writable.
  const auto dir = ktune::test::scratch_dir("cli-unwritable-cubin");
  std::ofstream(dir / "cubin") << "not a folder";
  const std::string ktune = "KTUNE_CACHE_DIR=" + dir.string() + " " + ktune_exe().string() + " ";
  const std::string spec = " --spec " + std::string(KTUNE_SOURCE_DIR) + "/examples/vector_add/vector_add.json";
  const std::string said = "warning: the binary cache did not keep ";
  const std::string why = " (cannot write file " + (dir / "cubin").string() + "/";
  for (const std::string& command : {"run --backend emu" + spec, "run --backend emu --timeout 60" + spec,
                                    "tune --backend emu --budget 2 --cache " + (dir / "tuned.json").string() + spec}) {
    INFO(command);
    std::string out, err;
    REQUIRE(run_command("{ " + ktune + command + " 2>/dev/null; }", &out) == 0);
    CHECK_THAT(out, !Catch::Contains("FAIL") && !Catch::Contains("warning"));
    REQUIRE(run_command("{ " + ktune + command + " >/dev/null; }", &err) == 0);
    const auto at = err.find(said);
    REQUIRE(at != std::string::npos);
    CHECK(err.find(said, at + 1) == std::string::npos);
    CHECK_THAT(err.substr(at),
               Catch::Contains(why) && Catch::EndsWith(" again (KTUNE_CACHE_DIR names another folder for it)\n"));
  }
  CHECK(ktune::read_file(dir / "cubin") == "not a folder");
  // Where it can write, nothing is said.
  std::string err;
  REQUIRE(run_command("{ KTUNE_CACHE_DIR=" + (dir / "writable").string() + " " + ktune_exe().string() +
                          " run --backend emu" + spec + " >/dev/null; }",
                      &err) == 0);
  CHECK_THAT(err, !Catch::Contains("warning"));
}

TEST_CASE("CLI: ktune tune --model tunes every kernel one training step needs", "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-tune-model");
  const auto cache = dir / "tiny.json";
  std::string out;
  // tf32: compiled mode's flash attention (f32 runs the softmax of materialised attention instead).
  const int rc = run_command(ktune_exe().string() + " tune --backend emu --model tiny --ctx 16 --batch 2 --budget 1 "
                                                    "--dtype tf32 --cache " + cache.string(),
                             &out);
  INFO(out);
  REQUIRE(rc == 0);
  std::ifstream in(cache);
  const auto j = nlohmann::json::parse(in);
  std::set<std::string> families;
  for (const auto& e : j["entries"]) families.insert(e["key"]["family"].get<std::string>());
  for (const char* f : {"rmsnorm_fwd", "rmsnorm_bwd", "residual_rmsnorm_fwd", "residual_rmsnorm_bwd", "swiglu_fwd",
                        "swiglu_bwd", "rope_fwd", "rope_bwd", "attention_fwd", "attention_bwd", "embedding_fwd",
                        "embedding_bwd", "cross_entropy_fwd", "cross_entropy_bwd", "grad_norm", "adamw"})
    CHECK(families.count(f) == 1);
  CHECK_THAT(out, Catch::Contains("16 winners written to"));
  // Each kernel after the first says the run's time so far and what the rest would take at that pace.
  CHECK(ktune::test::occurrences(out, " so far; about ") == 15);
  CHECK(ktune::test::occurrences(out, " left at that pace)\n") == 15);
  // Each kernel's table is printed as the next kernel starts: a run killed at its third kernel has shown two.
  const auto logs = dir / "logs";
  const std::string killed = (dir / "killed.out").string();
  run_command("(" + ktune_exe().string() + " tune --backend emu --model tiny --ctx 16 --batch 2 --budget 1 --dtype "
              "tf32 --cache " + (dir / "killed.json").string() + " --log " + logs.string() + "/ > " + killed +
              " 2>/dev/null & pid=$!; " +
              ktune::test::wait_while_running("[ \"$(ls " + logs.string() +
                                              " 2>/dev/null | grep -c 'log$')\" -ge 3 ]") +
              "kill -KILL $pid; wait $pid)",
              nullptr);
  const std::string shown = ktune::read_file(killed);
  INFO(shown);
  CHECK(ktune::test::occurrences(shown, ", fastest 1 of 1 evaluated, as timed in the search:") >= 2);

  CHECK(run_command(ktune_exe().string() + " tune --backend emu --model tiny --family swiglu_fwd --cache " +
                        (dir / "none.json").string(),
                    &out) == 2);
  CHECK_THAT(out, Catch::Contains("give either --family with --problem, or --model"));
  CHECK_FALSE(std::filesystem::exists(dir / "none.json"));
}

TEST_CASE("CLI: tune --model --accumulate tunes the gradient accumulation's adds that train --accumulate then "
          "finds",
          "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-tune-accumulate");
  const auto cache = dir / "tiny.json";
  const std::string shape = " --model tiny --ctx 8 --batch 1 --accumulate 2 --threads 2 --cache " + cache.string();
  std::string out;
  REQUIRE(run_command("KTUNE_PRINT=quiet " + ktune_exe().string() + " tune --backend emu --budget 1 --no-isolate" +
                          shape,
                      &out) == 0);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("18 winners written to"));
  std::ifstream in(cache);
  const auto entries = nlohmann::json::parse(in)["entries"];
  std::set<std::string> adds;
  for (const auto& e : entries)
    if (e["key"]["family"] == "prim_add") adds.insert(e["key"]["problem_key"].get<std::string>());
  CHECK(adds.size() == 2);  // a norm's gradient and the embedding's
  REQUIRE(run_command(ktune_exe().string() + " train --backend emu --steps 1" + shape, &out) == 0);
  CHECK_THAT(out, Catch::Contains("18 kernels: 18 exact, 0 nearest, 0 default"));
  // One kernel's problem says nothing of micro-batches.
  CHECK(run_command(ktune_exe().string() + " tune --backend emu --family swiglu_fwd --problem "
                                           "'{\"dtype\":\"f32\",\"dims\":{\"n\":1000}}' --accumulate 2 --cache " +
                        (dir / "none.json").string(),
                    &out) == 2);
  CHECK_THAT(out, Catch::Contains("--accumulate shapes the kernels of --model"));
  CHECK_FALSE(std::filesystem::exists(dir / "none.json"));
}

TEST_CASE("CLI: a --deterministic run takes the fastest deterministic config its tuning measured where the cache "
          "entry holds one, and says so",
          "[cli][deterministic]") {
  const auto dir = ktune::test::scratch_dir("cli-tune-deterministic");
  const auto cache = dir / "tiny.json";
  const std::string shape = " --model tiny --ctx 8 --batch 1 --threads 2 --cache " + cache.string();
  std::string out;
  REQUIRE(run_command("KTUNE_PRINT=quiet " + ktune_exe().string() + " tune --backend emu --budget 1 --no-isolate" +
                          shape,
                      &out) == 0);
  // The embedding backward's entry as a session leaves it where atomics won: its deterministic pick beside it.
  auto doc = nlohmann::json::parse(ktune::read_file(cache));
  int edited = 0;
  for (auto& e : doc["entries"])
    if (e["key"]["family"] == "embedding_bwd") {
      nlohmann::json sorted = e["config"];
      sorted["deterministic"] = 1;
      e["config"]["deterministic"] = 0;
      e["deterministic"] = {{"config", sorted}, {"time_ms", e["time_ms"]}};
      ++edited;
    }
  REQUIRE(edited == 1);
  const auto run = [&](const nlohmann::json& d) {
    std::ofstream(cache) << d.dump(1);
    std::string said;
    REQUIRE(run_command(ktune_exe().string() + " bench e2e --backend emu --trials 1 --warmup 0 --deterministic" +
                            shape + " 2>&1",
                        &said) == 0);
    return said;
  };
  out = run(doc);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("; deterministic: 1 kernel takes another config, one that sums in a fixed order (1 "
                                  "the fastest such that tuning measured)"));
  // Without the pick, the nearest config that sums in a fixed order, and nothing said of tuning.
  for (auto& e : doc["entries"]) e.erase("deterministic");
  out = run(doc);
  CHECK_THAT(out, Catch::Contains("another config, one that sums in a fixed order") &&
                      !Catch::Contains("that tuning measured"));
}

TEST_CASE("CLI: tune keeps, reports and shows the fastest deterministic config it measured where the winner sums by "
          "atomics",
          "[cli][deterministic]") {
  const auto dir = ktune::test::scratch_dir("cli-tune-deterministic-pick");
  const auto cache = dir / "tuned.json";
  std::string out;
  REQUIRE(run_command("{ " + ktune_exe().string() + " --json tune --backend emu --no-isolate --family embedding_bwd "
                          "--problem '{\"dtype\":\"f32\",\"dims\":{\"rows\":64,\"dim\":64,\"vocab\":100}}' "
                          "--budget 8 --log " + (dir / "s.log").string() + " --cache " + cache.string() +
                          " 2>/dev/null; }",
                      &out) == 0);
  const auto result = nlohmann::json::parse(out);
  INFO(out);
  // On the emulation either may win: a winner by atomics has its deterministic pick beside it, another none.
  const bool atomics = result["best_config"]["deterministic"] == 0;
  const auto entry = nlohmann::json::parse(ktune::read_file(cache))["entries"][0];
  if (atomics) {
    REQUIRE(result["deterministic"].is_object());
    CHECK(result["deterministic"]["config"]["deterministic"] != 0);
    CHECK(entry["deterministic"]["config"] == result["deterministic"]["config"]);
    REQUIRE(run_command(ktune_exe().string() + " cache show " + cache.string(), &out) == 0);
    CHECK_THAT(out, Catch::Contains("; deterministic: " + result["deterministic"]["config"].dump() + " at "));
  } else {
    CHECK(result["deterministic"].is_null());
    CHECK_FALSE(entry.contains("deterministic"));
  }
  REQUIRE(run_command(ktune_exe().string() + " log show " + (dir / "s.log").string(), &out) == 0);
  // Two CHECK_THATs, not one over `atomics ? Contains(...) : !Contains(...)`: the conditional turns the first
  // matcher into the second's type, a negation holding a reference to a temporary gone before the match.
  if (atomics)
    CHECK_THAT(out, Catch::Contains("a --deterministic run takes " + result["deterministic"]["config"].dump()));
  else
    CHECK_THAT(out, !Catch::Contains("a --deterministic run takes"));
}

TEST_CASE("CLI: tune --deterministic writes its winner as the entry, or as the deterministic pick beside an entry "
          "whose config sums by atomics",
          "[cli][deterministic]") {
  const auto dir = ktune::test::scratch_dir("cli-tune-deterministic-search");
  const auto cache = dir / "tuned.json";
  const std::string tune = "{ " + ktune_exe().string() +
                           " --json tune --backend emu --no-isolate --family embedding_bwd --problem "
                           "'{\"dtype\":\"f32\",\"dims\":{\"rows\":64,\"dim\":64,\"vocab\":100}}' "
                           "--budget 4 --deterministic --cache " + cache.string() + " 2>/dev/null; }";
  std::string out;
  REQUIRE(run_command(tune, &out) == 0);
  auto result = nlohmann::json::parse(out);
  CHECK(result["best_config"]["deterministic"] != 0);
  CHECK(result["written_as"] == "entry");
  CHECK(result["deterministic_search"] == true);
  // An entry whose config sums by atomics (a session without the flag found it fastest) keeps it.
  auto doc = nlohmann::json::parse(ktune::read_file(cache));
  doc["entries"][0]["config"]["deterministic"] = 0;
  std::ofstream(cache) << doc.dump(1);
  REQUIRE(run_command(tune, &out) == 0);
  result = nlohmann::json::parse(out);
  CHECK(result["written_as"] == "deterministic pick");
  const auto entry = nlohmann::json::parse(ktune::read_file(cache))["entries"][0];
  CHECK(entry["config"]["deterministic"] == 0);
  CHECK(entry["deterministic"]["config"] == result["best_config"]);
  // A kernel none of whose configs sums in a fixed order: one line, exit 2, nothing written.
  CHECK(run_command(ktune_exe().string() + " tune --backend emu --family prim_index_add --problem "
                                           "'{\"dtype\":\"f32\",\"dims\":{\"cols\":4,\"rows\":8,\"table_rows\":8}}' "
                                           "--deterministic --cache " + (dir / "none.json").string(),
                    &out) == 2);
  CHECK_THAT(out, Catch::Contains("the run cannot be deterministic"));
  CHECK_FALSE(std::filesystem::exists(dir / "none.json"));
}

TEST_CASE("CLI: tune ends with the fastest configs, logs under the cache folder, log show reads it back", "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-tune-report");
  const auto cache_dir = dir / "cache-dir";
  std::filesystem::create_directories(dir / "work");
  const std::string env = "cd " + (dir / "work").string() + " && KTUNE_CACHE_DIR=" + cache_dir.string() + " ";
  const std::string tune = ktune_exe().string() + " tune --backend emu --family swiglu_fwd --problem "
                           "'{\"dtype\":\"f32\",\"dims\":{\"n\":1000}}' --budget 4 --cache tuned.json";
  std::string out;
  REQUIRE(run_command(env + tune, &out) == 0);
  INFO(out);
  // The top-k table, labelled as emulated host time, never as GPU results.
  CHECK_THAT(out, Catch::Contains("swiglu_fwd on f32;n=1000, fastest 4 of 4 evaluated, as timed in the search:"));
  CHECK_THAT(out, Catch::Contains("host ms (emulated)") && Catch::Contains("vs default (emulated host time)") &&
                      Catch::Contains("not GPU results"));
  CHECK_THAT(out, Catch::Contains("winner"));
  CHECK_THAT(out, !Catch::Contains("GB/s"));  // no rates from host times
  // The working folder holds the cache and nothing else; the log is under the cache folder.
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir / "work")) names.insert(e.path().filename().string());
  CHECK(names == std::set<std::string>{"tuned.json"});
  const auto log = cache_dir / "sessions" / "swiglu_fwd.f32-n1000.log";
  REQUIRE(std::filesystem::exists(log));
  // log show prints the same fastest rows.
  std::string shown;
  REQUIRE(run_command(ktune_exe().string() + " log show " + log.string(), &shown) == 0);
  INFO(shown);
  // Its summary is the search's times, said so beside the winner's timed again.
  CHECK_THAT(shown, Catch::Contains("; fastest in the search {") && Catch::Contains("x the default's search time"));
  // The first row of the top table, up to its time: "|   1 | {config} |   0.0333 ".
  auto first_row = [](const std::string& text) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("|", 0) != 0) continue;
      const auto rank_end = line.find('|', 1);
      if (rank_end == std::string::npos) continue;
      std::string rank = line.substr(1, rank_end - 1);
      rank.erase(std::remove(rank.begin(), rank.end(), ' '), rank.end());
      if (rank != "1") continue;
      const auto config_end = line.find('|', rank_end + 1);
      return line.substr(0, line.find('|', config_end + 1));
    }
    return std::string();
  };
  CHECK_FALSE(first_row(out).empty());
  CHECK(first_row(shown) == first_row(out));
  CHECK_THAT(shown, Catch::Contains("4 evaluations, 0 failed") && Catch::Contains("emulated host time"));
  CHECK(run_command(ktune_exe().string() + " log show " + (dir / "missing.log").string(), &shown) == 2);
  // run --cache runs the winner, as the runtime would choose it, and says where it came from.
  const std::string winner = nlohmann::json::parse(std::ifstream(dir / "work" / "tuned.json"))
                                 .at("entries")[0]
                                 .at("config")
                                 .dump();
  REQUIRE(run_command(env + ktune_exe().string() + " run --backend emu --family swiglu_fwd --problem "
                                                    "'{\"dtype\":\"f32\",\"dims\":{\"n\":1000}}' --cache tuned.json",
                      &shown) == 0);
  CHECK_THAT(shown, Catch::StartsWith("swiglu_fwd f32;n=1000 on emu (") &&
                        Catch::Contains("config " + winner + " (tuned.json: exact)\n") && Catch::Contains("PASS"));

  // A --log naming a folder (one ending in /, made; or one that exists) holds the log under its default name.
  REQUIRE(run_command(env + tune + " --log logs/", &out) == 0);
  CHECK(std::filesystem::exists(dir / "work" / "logs" / "swiglu_fwd.f32-n1000.log"));
  CHECK_THAT(out, Catch::Contains("logs/swiglu_fwd.f32-n1000.log"));
  std::filesystem::create_directories(dir / "work" / "held");
  REQUIRE(run_command(env + tune + " --log held", &out) == 0);
  CHECK(std::filesystem::is_regular_file(dir / "work" / "held" / "swiglu_fwd.f32-n1000.log"));

  // KTUNE_PRINT: quiet drops progress and the table; all prints every evaluation; a typo is refused.
  REQUIRE(run_command(env + "KTUNE_PRINT=quiet " + tune, &out) == 0);
  CHECK_THAT(out, !Catch::Contains(" evaluated of ") && !Catch::Contains("fastest") &&
                      Catch::Contains("winner written to"));
  REQUIRE(run_command(env + "KTUNE_PRINT=all " + tune, &out) == 0);
  CHECK_THAT(out, Catch::Contains("#1 {") && Catch::Contains("#4 {") && Catch::Contains("fastest"));
  CHECK(run_command(env + "KTUNE_PRINT=loud " + tune, &out) == 2);
  CHECK_THAT(out, Catch::Contains("KTUNE_PRINT must be quiet, summary or all"));
}

TEST_CASE("CLI: a stop signal ends a tuning session after its evaluation, the best so far in the cache, and "
          "--resume goes on",
          "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-tune-signal");
  const auto log = dir / "t.log", cache = dir / "tuned.json";
  const std::string tune = ktune_exe().string() +
                           " tune --backend emu --strategy exhaustive --family rmsnorm_fwd --problem "
                           "'{\"dtype\":\"f32\",\"dims\":{\"rows\":64,\"dim\":768}}' --cache " +
                           cache.string() + " --log " + log.string();
  // The whole space (56 valid points of 160) were the signal not heeded; SIGINT to the process group, as
  // Ctrl-C sends it, twice (a wrapper's), once a few evaluations are logged: the workers go on with theirs.
  std::string out;
  const int code = run_command(
      "(setsid " + tune + " > " + (dir / "out").string() + " 2> " + (dir / "err").string() + " & pid=$!; " +
          ktune::test::wait_while_running("[ \"$(wc -l < " + log.string() + " 2>/dev/null || echo 0)\" -ge 4 ]") +
          "kill -INT -$pid; sleep 0.005; kill -INT -$pid; wait $pid)",
      &out);
  CHECK(code == 128 + 2);
  const std::string err = ktune::read_file(dir / "err");
  CHECK_THAT(err, Catch::Contains("stopped by SIGINT in the session of rmsnorm_fwd") &&
                      Catch::Contains("run again with --resume to go on"));
  // How long the evaluation under way may still take.
  CHECK_THAT(err, Catch::Contains("stopping after this evaluation (within --timeout, 120 s)"));
  std::vector<nlohmann::json> lines;
  {
    std::istringstream in(ktune::read_file(log));
    for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  }
  // The evaluations: the lines past the header that are no winner (the session's pick, logged at its end).
  const auto evaluations = [](const std::vector<nlohmann::json>& all) {
    return static_cast<std::size_t>(
        std::count_if(all.begin(), all.end(), [](const nlohmann::json& j) { return j.contains("config"); }));
  };
  REQUIRE(lines.size() >= 4);
  const std::size_t logged = evaluations(lines);
  CHECK(logged < 56);  // the valid points of the space
  for (std::size_t i = 1; i < lines.size(); ++i) {
    INFO(lines[i].dump());
    CHECK(lines[i].dump().find("crashed") == std::string::npos);  // no worker died of the signal
  }
  const auto entries = nlohmann::json::parse(ktune::read_file(cache));
  CHECK(entries.dump().find("rmsnorm_fwd") != std::string::npos);
  // log show says the stopped session's best is as the search timed it; a log a kill cut before its winner line
  // says how to go on from it.
  REQUIRE(run_command(ktune_exe().string() + " log show " + log.string(), &out) == 0);
  CHECK_THAT(out, Catch::Contains("as timed in the search; ") && !Catch::Contains("timed again"));
  {
    std::ofstream killed(dir / "killed.log");
    for (const auto& line : lines)
      if (!line.contains("winner")) killed << line.dump() << "\n";
  }
  REQUIRE(run_command(ktune_exe().string() + " log show " + (dir / "killed.log").string(), &out) == 0);
  CHECK_THAT(out, Catch::Contains("no winner yet: the session was stopped or killed before it picked one") &&
                      Catch::Contains("--resume and --log " + (dir / "killed.log").string()));
  // --resume of a log that is not there says a new session starts.
  REQUIRE(run_command(ktune_exe().string() + " tune --backend emu --family swiglu_fwd --problem "
                          "'{\"dtype\":\"f32\",\"dims\":{\"n\":1000}}' --budget 1 --resume --cache " +
                          (dir / "other.json").string() + " --log " + (dir / "typo.log").string(),
                      &out) == 0);
  CHECK_THAT(out, Catch::Contains("note: nothing to resume: " + (dir / "typo.log").string() +
                                  " does not exist; a new session starts there"));
  // Resumed with a budget a few evaluations past the logged ones: those come from the log, not run again.
  REQUIRE(run_command(tune + " --resume --budget " + std::to_string(logged + 2) + " 2>/dev/null", &out) == 0);
  std::istringstream again(ktune::read_file(log));
  std::vector<nlohmann::json> now;
  for (std::string line; std::getline(again, line);) now.push_back(nlohmann::json::parse(line));
  CHECK(evaluations(now) == logged + 2);
}

TEST_CASE("CLI: a stopped session that logged beside the default log another session held says to resume from "
          "its own log",
          "[cli]") {
  const auto dir = ktune::test::own_cache_dir("cli-tune-signal-beside");
  const auto default_log = dir / "sessions" / "rmsnorm_fwd.f32-dim768-rows64.log";
  // Another session writes the default log: this one logs beside it, under its process id.
  const ktune::FileLock other(ktune::lock_path(default_log), "session log");
  const std::string tune = "env KTUNE_CACHE_DIR=" + dir.string() + " " + ktune_exe().string() +
                           " tune --backend emu --strategy exhaustive --family rmsnorm_fwd --problem "
                           "'{\"dtype\":\"f32\",\"dims\":{\"rows\":64,\"dim\":768}}' --cache " +
                           (dir / "tuned.json").string();
  const std::string logs = (dir / "sessions").string() + "/rmsnorm_fwd.f32-dim768-rows64.*.log";
  std::string out;
  const int code = run_command(
      "(setsid " + tune + " > " + (dir / "out").string() + " 2> " + (dir / "err").string() + " & pid=$!; " +
          ktune::test::wait_while_running("[ \"$(cat " + logs + " 2>/dev/null | wc -l)\" -ge 3 ]") +
          "kill -INT -$pid; wait $pid)",
      &out);
  CHECK(code == 128 + 2);
  const std::string err = ktune::read_file(dir / "err");
  INFO(err);
  std::vector<std::filesystem::path> beside;
  for (const auto& e : std::filesystem::directory_iterator(dir / "sessions"))
    if (e.path().filename().string().ends_with(".log") && e.path() != default_log) beside.push_back(e.path());
  REQUIRE(beside.size() == 1);
  CHECK_THAT(err, Catch::Contains("run again with --resume --log " + beside[0].string() + " to go on"));
}

TEST_CASE("CLI: tune whose output's reader is gone (SIGPIPE) ends after its evaluation, the best so far in the cache",
          "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-tune-sigpipe");
  const auto cache = dir / "tuned.json";
  // Every evaluation printed, to a pipe head leaves after its first line: the next write raises SIGPIPE. The
  // whole space (56 valid points) were the signal not heeded.
  std::string out;
  REQUIRE(run_command("{ KTUNE_PRINT=all " + ktune_exe().string() +
                          " tune --backend emu --strategy exhaustive --family rmsnorm_fwd --problem "
                          "'{\"dtype\":\"f32\",\"dims\":{\"rows\":64,\"dim\":768}}' --cache " +
                          cache.string() + " --log " + (dir / "t.log").string() + " 2>&1; echo $? > " +
                          (dir / "rc").string() + "; } | head -n 1 >/dev/null",
                      &out) == 0);
  CHECK(ktune::read_file(dir / "rc") == std::to_string(128 + 13) + "\n");
  REQUIRE(std::filesystem::exists(cache));
  CHECK(ktune::read_file(cache).find("rmsnorm_fwd") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "t.log.lock"));
}

TEST_CASE("CLI: tune --resume with another strategy counts the logged results against the budget", "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-tune-resume-budget");
  const auto log = dir / "s.log";
  const std::string tune = ktune_exe().string() +
                           " tune --backend emu --family swiglu_fwd --problem '{\"dtype\":\"f32\",\"dims\":{"
                           "\"n\":1000}}' --cache " + (dir / "c.json").string() + " --log " + log.string();
  const auto evaluations = [&] {
    std::istringstream in(ktune::read_file(log));
    std::size_t n = 0;
    for (std::string line; std::getline(in, line);) n += nlohmann::json::parse(line).contains("config") ? 1 : 0;
    return n;
  };
  std::string out;
  REQUIRE(run_command(tune + " --budget 6 2>&1", &out) == 0);
  REQUIRE(evaluations() == 6);
  // The budget is the session's: the log's six results have spent it, whatever the new strategy proposes.
  REQUIRE(run_command(tune + " --resume --strategy random --seed 9 --budget 6 2>&1", &out) == 0);
  INFO(out);
  CHECK(evaluations() == 6);
  CHECK_THAT(out, Catch::Contains("6 of them read from the log"));
  REQUIRE(run_command(tune + " --resume --strategy random --seed 9 --budget 8 2>&1", &out) == 0);
  CHECK(evaluations() == 8);
  // A line amid the log that does not parse: log show and --resume say so, with its line number.
  std::vector<std::string> lines;
  {
    std::istringstream in(ktune::read_file(log));
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  REQUIRE(lines.size() > 3);
  lines[2] = "xx not json";
  {
    std::ofstream rewritten(log, std::ios::trunc);
    for (const auto& line : lines) rewritten << line << "\n";
  }
  const std::string note = "note: session log " + log.string() + ": skipped 1 unreadable line (the first at line 3)";
  REQUIRE(run_command(ktune_exe().string() + " log show " + log.string() + " 2>&1", &out) == 0);
  CHECK_THAT(out, Catch::Contains(note + "; their evaluations are not shown"));
  REQUIRE(run_command(tune + " --resume --strategy random --seed 9 --budget 8 2>&1", &out) == 0);
  CHECK_THAT(out, Catch::Contains(note + "; their evaluations run again"));
  CHECK(run_command(ktune_exe().string() + " log show " + dir.string() + " 2>&1", &out) == 2);
  CHECK_THAT(out, Catch::Contains("session log " + dir.string() + " is a directory"));
}

}  // namespace cli_tune_emu_test
