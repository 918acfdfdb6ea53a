// scripts/gpu-check without a GPU: its dry run (KTUNE_CHECK_DRY=1) prints
// every step's command line, and each ktune command among them, run here
// with KTUNE_NO_DEVICE=1, must get as far as asking for the device: its
// options and inputs (the tuned cache the script makes when no tuning ran)
// are ones the CLI accepts. Each run of the gpu test binary must select
// test cases (a filter that selects none would pass on the GPU machine)
// and skip them for want of a device. The PyTorch peers' command lines go
// through the peers' own argument parsers. What a GPU machine would
// otherwise find in the first minutes of a short lease is found here.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/files.hpp"
#include "support.hpp"

namespace scripts_gpu_check_test {

using ktune::test::ktune_exe;
using ktune::test::run_command;

namespace {

const std::string kSource = KTUNE_SOURCE_DIR;
// Every step, the optional ones included.
const char* kAllSteps =
    "tests tune families tune-step-small attention attention-bench attention-bench-torch headline headline-ab "
    "headline-ab-turns bench bf16 peers ops ops-small pdl train deterministic recompute "
    "seed-002 e2e";

/// The command lines ("+ cmd args...", shell-quoted, without the "+ ") of a
/// dry run of the script copied to `root`/scripts, with the steps `only`
/// (KTUNE_CHECK_ONLY; empty: the default): it works in `root`, where its
/// build folder (build-gpu) is made and the tests folder is linked.
std::vector<std::string> dry_run_commands(const std::filesystem::path& root, const std::string& only) {
  std::filesystem::create_directories(root / "scripts");
  std::filesystem::copy_file(kSource + "/scripts/gpu-check", root / "scripts" / "gpu-check");
  std::filesystem::create_directory_symlink(kSource + "/tests", root / "tests");  // the test files it runs
  std::string text;
  const int rc = run_command("KTUNE_CHECK_DRY=1 " + (only.empty() ? "" : "KTUNE_CHECK_ONLY='" + only + "' ") +
                                 "bash " + (root / "scripts" / "gpu-check").string() + " " + (root / "out").string(),
                             &text);
  INFO(text);
  REQUIRE(rc == 0);
  std::vector<std::string> commands;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("+ ", 0) == 0) commands.push_back(line.substr(2));
  return commands;
}

/// `text` with every `from` replaced by `to`.
std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (std::size_t at = 0; (at = text.find(from, at)) != std::string::npos; at += to.size())
    text.replace(at, from.size(), to);
  return text;
}

/// How many commands of each kind a dry run printed, each run here as far as it goes without a device.
struct DryRunCounts {
  std::size_t ktune = 0, test_files = 0, e2e_peers = 0, attention_peers = 0;
};

DryRunCounts run_dry_commands(const std::vector<std::string>& commands, const std::filesystem::path& build) {
  DryRunCounts n;
  const std::string tests_exe = (ktune_exe().parent_path().parent_path() / "tests" / "ktune_tests_gpu").string();
  for (const auto& command : commands) {
    INFO(command);
    const std::string with_ktune = replace_all(command, "build-gpu/cli/ktune", ktune_exe().string());
    const std::string here = replace_all(replace_all(with_ktune, "build-gpu/tests/ktune_tests_gpu", tests_exe),
                                         "build-gpu/", build.string() + "/");
    std::string peer;  // a peer script's module name
    if (command.rfind("build-gpu/cli/ktune ", 0) == 0) {
      ++n.ktune;
      std::string out;
      const int rc = run_command("cd " + kSource + " && KTUNE_NO_DEVICE=1 " + here, &out);
      INFO(out);
      CHECK(rc == 2);
      CHECK_THAT(out, Catch::Contains("no CUDA device: KTUNE_NO_DEVICE is set"));
    } else if (command.find("build-gpu/tests/ktune_tests_gpu ") != std::string::npos) {
      ++n.test_files;
      // 77: the file's test cases were selected and skipped for want of a
      // device (a filter selecting none exits 0).
      std::string out;
      const int rc = run_command("cd " + kSource + " && KTUNE_NO_DEVICE=1 " + here, &out);
      INFO(out);
      CHECK(rc == ktune::test::kSkipCode);
    } else if (command.rfind("python3 bench/peers/torch_e2e.py ", 0) == 0) {
      ++n.e2e_peers;
      peer = "torch_e2e";
    } else if (command.rfind("python3 bench/peers/torch_attention.py", 0) == 0) {
      ++n.attention_peers;
      peer = "torch_attention";
    } else if (command.rfind("python3 bench/peers/torch_adam.py", 0) == 0) {
      peer = "torch_adam";
    }
    if (!peer.empty()) {
      // The peers' parsers need no torch: their arguments are checked as the peer would read them.
      const std::string prefix = "python3 bench/peers/" + peer + ".py";
      const std::string args = command.substr(prefix.size());
      std::string out;
      const int rc = run_command("cd " + kSource +
                                     " && python3 -c 'import sys; sys.path.insert(0, \"bench/peers\"); "
                                     "import " + peer + "; " + peer + ".parse(sys.argv[1:])' " + args,
                                 &out);
      INFO(out);
      CHECK(rc == 0);
    }
  }
  return n;
}

/// The gpu test files (tests/**/*_gpu_test.cpp).
/// The gpu test files; each name once, since gpu-check runs a file by its name's Catch tag ("[#NAME]") into a
/// log of that name.
std::size_t gpu_test_files() {
  std::set<std::string> names;
  std::size_t n = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(kSource + "/tests")) {
    const std::string name = e.path().filename().string();
    if (!name.ends_with("_gpu_test.cpp")) continue;
    ++n;
    CHECK(names.insert(name).second);
  }
  return n;
}

/// Whether one of `commands` contains `text`.
bool any_contains(const std::vector<std::string>& commands, const std::string& text) {
  return std::any_of(commands.begin(), commands.end(),
                     [&](const std::string& c) { return c.find(text) != std::string::npos; });
}

}  // namespace

TEST_CASE("gpu-check: every ktune command of its dry run is accepted up to the device", "[cli][gpu-check]") {
  const auto dir = ktune::test::scratch_dir("gpu_check");
  const auto commands = dry_run_commands(dir, kAllSteps);
  const auto build = dir / "build-gpu";
  CHECK(std::filesystem::exists(build / "tuned.json"));  // for the benchmarks, though no tuning ran
  const auto n = run_dry_commands(commands, build);
  // Tuning (5 AdamW, the kernel spec, bf16 AdamW, the xl step, the small step at ctx 256, 3 attention), 7
  // benchmarks (adam twice, attention twice, precision, ops, the small model's ops), the leaderboard backward's
  // five configs, the d 128 forward's four and the leaderboard forward's four, e2e's 5 sizes x 2 dtypes x 2
  // modes, each beside its peer, and compiled mode's 10 once more with CUDA graphs; programmatic dependent launch
  // beside ordinary launches (two bench ops, the small step op by op and as graphs); `ktune train` checkpointed,
  // then resumed, then over 2 micro-batches a step; the small step trained twice with --deterministic and twice
  // without, then timed with and without it; the small step keeping activations and recomputing at two levels;
  // seed 002's table, 5 sizes eager fp32 and compiled bf16.
  CHECK(n.ktune == 12 + 7 + 13 + 20 + 10 + 6 + 3 + 6 + 3 + 10);
  CHECK(n.test_files == gpu_test_files());
  // and torch.compile's CUDA graphs beside compiled mode's, and the recompute step's two
  CHECK(n.e2e_peers == 20 + 10 + 2);
  CHECK(n.attention_peers == 2);
  const auto has = [&](const std::string& text) { return any_contains(commands, text); };
  CHECK(has("--families rmsnorm_bwd\\,residual_rmsnorm_bwd\\,embedding_bwd\\,cross_entropy_fwd --pdl"));
  CHECK(has("--dtype bf16 --graph --pdl"));
  CHECK(has("tune --model small --ctx 256 --batch 4 --dtype bf16"));
  CHECK(has("bench ops --model small --cache"));
  CHECK(has("bench precision --json-out"));
  CHECK(has("bench e2e --backend cuda --mode eager --dtype f32 --model 2.7B --sweep"));
  CHECK(has("--checkpoint-every 10 --resume"));
  CHECK(has("--dtype bf16 --recompute swiglu --save-batch"));
  CHECK(has("--dtype bf16 --recompute blocks --save-batch"));
  CHECK(has("--with-optimizer --recompute --json-out"));  // the peer's
}

TEST_CASE("gpu-check: the default steps are the gpu tests, the attention targets timed and the small bf16 step "
          "compiled, with graphs and eager, and the second command's tune the targets and time them beside other "
          "shapes",
          "[cli][gpu-check]") {
  const auto has_in = [](const std::vector<std::string>& commands, const std::string& text) {
    return any_contains(commands, text);
  };
  {
    const auto dir = ktune::test::scratch_dir("gpu_check_quick");
    const auto commands = dry_run_commands(dir, "");
    const auto n = run_dry_commands(commands, dir / "build-gpu");
    CHECK(n.test_files == gpu_test_files());
    // bench attention on the two targets and bench precision, bench e2e small bf16 eager and compiled (and
    // compiled with CUDA graphs); no tuning and no A/B runs, which are the second command's.
    CHECK(n.ktune == 2 + 3);
    CHECK(n.attention_peers == 1);
    CHECK(n.e2e_peers == 3);
    const auto has = [&](const std::string& text) { return has_in(commands, text); };
    CHECK(has("bench attention --tables leaderboard"));
    CHECK(has("bench precision --json-out"));
    CHECK(has("bench e2e --backend cuda --mode compiled"));
    CHECK(has("bench e2e --backend cuda --mode eager"));
    CHECK(has("bench e2e --backend cuda --mode compiled --graph"));
    CHECK_FALSE(has("tune --family"));
    CHECK_FALSE(has(" run --backend gpu"));
    // The longer steps' sessions and AdamW's benchmarks would not fit the lease.
    CHECK_FALSE(has("bench adam"));
  }
  const auto dir = ktune::test::scratch_dir("gpu_check_targets");
  const auto commands = dry_run_commands(dir, "targets");
  const auto n = run_dry_commands(commands, dir / "build-gpu");
  CHECK(n.test_files == 0);
  // Three attention tuning sessions, bench attention on the two targets and bench precision, the leaderboard
  // backward's four configs (the default, overlapped, 64-query tiles, FlashAttention-2's partition), the d 128
  // forward's three (the default, in turn, FlashAttention-2's shape) and the leaderboard forward's three (the
  // default, overlapped, FlashAttention-2's shape); the warpgroups taking turns are headline-ab-turns' (below).
  CHECK(n.ktune == 3 + 2 + 10);
  CHECK(n.attention_peers == 1);
  CHECK(n.e2e_peers == 0);
  const auto has = [&](const std::string& text) { return has_in(commands, text); };
  CHECK(has("bench attention --tables leaderboard"));
  CHECK(has("run --backend gpu --family attention_bwd"));
  CHECK(has("run --backend gpu --family attention_fwd"));
  CHECK(has("\\\"mma\\\":0\\}"));  // FlashAttention-2's shapes on mma.sync (shell-quoted)
  CHECK(has("--config \\{\\\"block_m\\\":64\\} --time"));  // the backward at 64-query tiles (shell-quoted)
  CHECK_FALSE(has("--config \\{\\\"pingpong\\\":1\\} --time"));  // ping-pong: headline-ab-turns' (shell-quoted)
  const std::string overlapped = "--config \\{\\\"mma\\\":2\\} --time";  // shell-quoted
  CHECK(std::any_of(commands.begin(), commands.end(), [&](const std::string& c) {
    return c.find("--family attention_bwd") != std::string::npos && c.find(overlapped) != std::string::npos;
  }));  // the leaderboard backward overlapped
  CHECK(has(overlapped));  // and its forward
  CHECK(has("--config \\{\\\"mma\\\":1\\} --time"));  // the d 128 forward in turn (shell-quoted)
  CHECK(has("tune --family attention_bwd"));
  // The tuning sessions come before the benchmark that reads their cache.
  const auto at = [&](const std::string& text) {
    return std::find_if(commands.begin(), commands.end(),
                        [&](const std::string& c) { return c.find(text) != std::string::npos; }) -
           commands.begin();
  };
  CHECK(at("tune --family attention_bwd") < at("bench attention --tables leaderboard"));
}

TEST_CASE("gpu-check: headline-ab-turns times each attention default beside its warpgroups taking turns",
          "[cli][gpu-check]") {
  const auto dir = ktune::test::scratch_dir("gpu_check_turns");
  const auto commands = dry_run_commands(dir, "headline-ab-turns");
  std::vector<std::string> runs;
  for (const auto& c : commands)
    if (c.find(" run --backend gpu --family attention_") != std::string::npos) runs.push_back(c);
  REQUIRE(runs.size() == 6);  // the three defaults, each with ping-pong
  CHECK(std::count_if(runs.begin(), runs.end(), [](const std::string& c) {
          return c.find("--config \\{\\\"pingpong\\\":1\\} --time") != std::string::npos;
        }) == 3);
  CHECK(std::none_of(runs.begin(), runs.end(),
                     [](const std::string& c) { return c.find("mma") != std::string::npos; }));
}

TEST_CASE("gpu-check: a step name it does not know is refused in one line, before anything runs or is written",
          "[cli][gpu-check]") {
  const auto dir = ktune::test::scratch_dir("gpu_check_unknown");
  std::filesystem::create_directories(dir / "scripts");
  std::filesystem::copy_file(kSource + "/scripts/gpu-check", dir / "scripts" / "gpu-check");
  const std::string script = (dir / "scripts" / "gpu-check").string();
  std::string text;
  for (const std::string only : {"deterministc", "tests e2e-small-bf17", "ops-3B", "*", "e2e-small-bf16-eagr"}) {
    INFO(only);
    CHECK(run_command("KTUNE_CHECK_DRY=1 KTUNE_CHECK_ONLY='" + only + "' bash " + script + " " +
                          (dir / "out").string(),
                      &text) == 2);
    CHECK(text.find('\n') + 1 == text.size());
    CHECK_THAT(text, Catch::StartsWith("gpu-check: no step is called '"));
    CHECK_FALSE(std::filesystem::exists(dir / "out"));
  }
  // Every step the script names is known to it (a dry run of each size's and dtype's parts).
  CHECK(run_command("KTUNE_CHECK_DRY=1 KTUNE_CHECK_ONLY='e2e-2.7B-f32-eager ops-xl seed-002-medium tune-step-large "
                    "headline-ab-turns' bash " + script + " " + (dir / "out").string(),
                    &text) == 0);
}

TEST_CASE("gpu-check: a PyTorch peer skipped for want of torch is named in the check's summary", "[cli][gpu-check]") {
  const auto dir = ktune::test::scratch_dir("gpu_check_no_torch");
  std::filesystem::create_directories(dir / "scripts");
  std::filesystem::copy_file(kSource + "/scripts/gpu-check", dir / "scripts" / "gpu-check");
  std::filesystem::create_directory_symlink(kSource + "/tests", dir / "tests");
  const std::string check = "KTUNE_CHECK_DRY=1 KTUNE_CHECK_ONLY='peers e2e-small-bf16-eager recompute' bash " +
                            (dir / "scripts" / "gpu-check").string() + " " + (dir / "out").string();
  std::string text;
  REQUIRE(run_command("KTUNE_CHECK_TORCH=0 " + check, &text) == 0);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("== summary") &&
                       Catch::Contains("NOT WHOLE: 4 PyTorch peer(s) skipped, python3 has no torch") &&
                       Catch::Contains("torch-recompute-e2e-small-bf16-none torch-recompute-e2e-small-bf16-blocks "
                                       "torch-e2e-small-bf16-eager torch_adam: no PyTorch figures"));
  CHECK_THAT(text, !Catch::Contains("+ python3 bench/peers/"));  // none of them run
  CHECK_THAT(ktune::read_file(dir / "out" / "results" / "summary.txt"), Catch::Contains("NOT WHOLE"));
  // With torch (as a dry run takes it), the summary says every peer ran.
  REQUIRE(run_command(check, &text) == 0);
  CHECK_THAT(text, Catch::Contains("every PyTorch peer asked for ran") && !Catch::Contains("NOT WHOLE"));
  CHECK_THAT(text, Catch::Contains("+ python3 bench/peers/torch_adam.py --tensors 1\\,32"));
}

TEST_CASE("the e2e peer's phase summaries carry the median of the trials, printed per row under the table",
          "[cli][gpu-check]") {
  // Its helpers need no torch. One slow trial of five moves the mean, not the median.
  std::string out;
  const int rc = run_command(
      "cd " + kSource +
          " && python3 -c 'import sys; sys.path.insert(0, \"bench/peers\"); import torch_e2e as t; "
          "s = t.summary([12.0, 11.0, 1000.0, 13.0, 12.5]); "
          "print(round(s[\"mean_ms\"], 3), s[\"median_ms\"]); "
          "print(t.medians({\"backend\": \"torch\", \"forward\": s, \"step\": t.summary([3.0, 4.0])}))'",
      &out);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK_THAT(out, Catch::StartsWith("209.7 12.5\ntorch: forward 12.500, step 3.500"));
}

}  // namespace scripts_gpu_check_test
