// scripts/gpu-check without a GPU: its dry run (KTUNE_CHECK_DRY=1) prints
// every step's command line, and each ktune command among them, run here
// with KTUNE_NO_DEVICE=1, must get as far as asking for the device: its
// options and inputs (the tuned cache the script makes when no tuning ran)
// are ones the CLI accepts. The PyTorch e2e peer's command lines go through
// the peer's own argument parser. What a GPU machine would otherwise find in
// its first minutes of a rare loan is found here.
#include <catch2/catch.hpp>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "support.hpp"

using ktune::test::ktune_exe;
using ktune::test::run_command;

namespace {

const std::string kSource = KTUNE_SOURCE_DIR;
// Every step, the optional ones included.
const char* kAllSteps = "tests tune families attention attention-bench bench bf16 peers ops e2e";

/// The command lines ("+ cmd args...", shell-quoted, without the "+ ") of a
/// dry run of the script copied to `root`/scripts: it works in `root`, where
/// its build folder (build-gpu) is made.
std::vector<std::string> dry_run_commands(const std::filesystem::path& root) {
  std::filesystem::create_directories(root / "scripts");
  std::filesystem::copy_file(kSource + "/scripts/gpu-check", root / "scripts" / "gpu-check");
  std::string text;
  const int rc = run_command("KTUNE_CHECK_DRY=1 KTUNE_CHECK_ONLY='" + std::string(kAllSteps) + "' bash " +
                                 (root / "scripts" / "gpu-check").string() + " " + (root / "out").string(),
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

}  // namespace

TEST_CASE("gpu-check: every ktune command of its dry run is accepted up to the device", "[cli][gpu-check]") {
  const auto dir = ktune::test::scratch_dir("gpu_check");
  const auto commands = dry_run_commands(dir);
  const auto build = dir / "build-gpu";
  CHECK(std::filesystem::exists(build / "tuned.json"));  // for the benchmarks, though no tuning ran
  std::size_t ktune_commands = 0, peer_commands = 0;
  for (const auto& command : commands) {
    INFO(command);
    if (command.rfind("build-gpu/cli/ktune ", 0) == 0) {
      ++ktune_commands;
      const std::string here = replace_all(replace_all(command, "build-gpu/cli/ktune", ktune_exe().string()),
                                           "build-gpu/", build.string() + "/");
      std::string out;
      const int rc = run_command("cd " + kSource + " && KTUNE_NO_DEVICE=1 " + here, &out);
      INFO(out);
      CHECK(rc == 2);
      CHECK_THAT(out, Catch::Contains("no CUDA device: KTUNE_NO_DEVICE is set"));
    } else if (command.rfind("python3 bench/peers/torch_e2e.py ", 0) == 0) {
      ++peer_commands;
      // The peer's parser needs no torch: its arguments are checked as the peer would read them.
      const std::string args = command.substr(std::string("python3 bench/peers/torch_e2e.py ").size());
      std::string out;
      const int rc = run_command("cd " + kSource +
                                     " && python3 -c 'import sys; sys.path.insert(0, \"bench/peers\"); "
                                     "import torch_e2e; torch_e2e.parse(sys.argv[1:])' " + args,
                                 &out);
      INFO(out);
      CHECK(rc == 0);
    }
  }
  // Tuning (5 AdamW, the kernel spec, bf16 AdamW, the xl step, 3 attention), 4 benchmarks, and e2e's
  // 5 sizes x 2 dtypes x 2 modes, each beside its peer.
  CHECK(ktune_commands == 11 + 4 + 20);
  CHECK(peer_commands == 20);
}
