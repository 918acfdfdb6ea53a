// The ktune executable: bad input gets one clear line and a non-zero exit,
// nothing is written; render prints text that nvcc compiles alone.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/files.hpp"
#include "base/safetensors.hpp"
#include "support.hpp"
#include "templates/common/family_helpers.hpp"
#include "templates/family.hpp"

namespace cli_cli_test {

using ktune::test::ktune_exe;
using ktune::test::run_command;

namespace {
int run_ktune(const std::string& args, std::string* out) { return run_command(ktune_exe().string() + " " + args, out); }

/// The lines of `text` that start with `prefix`.
std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) out.push_back(line);
  return out;
}

/// Sized to content: every line of a table is as wide as its header.
void check_aligned(const std::vector<std::string>& table) {
  REQUIRE(table.size() >= 3);  // header, rule, a row
  for (const auto& line : table) CHECK(line.size() == table.front().size());
}
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
  CHECK_THAT(out, Catch::Contains("unknown tunable 'warps'"));
  // A slip is named with what was meant; what is nothing like a known name is not guessed at.
  CHECK(run_ktune("render --family adamw --config '{\"thread\": 256}'", &out) == 2);
  CHECK_THAT(out, Catch::Contains("unknown tunable 'thread' (did you mean 'threads'?)"));
  CHECK(run_ktune("render --family rmsnorm_fw", &out) == 2);
  CHECK_THAT(out, Catch::Contains("unknown family 'rmsnorm_fw' (did you mean 'rmsnorm_fwd'?)"));
  CHECK_THAT(out, !Catch::Contains("did you mean 'adamw'"));
  CHECK(run_ktune("render --family zzzzzz", &out) == 2);
  CHECK_THAT(out, !Catch::Contains("did you mean"));
  // A misspelt dimension is named as unknown, not as the one it misses.
  CHECK(run_ktune("render --family rmsnorm_fwd --space --problem '{\"dtype\":\"f32\",\"dims\":{\"rows\":4,"
                  "\"dimm\":64}}'",
                  &out) == 2);
  CHECK_THAT(out, Catch::Contains("rmsnorm_fwd: unknown dimension 'dimm' (did you mean 'dim'?)"));
  CHECK(run_ktune("tune --backend emu --family rmsnorm_fwd --problem '{\"dtype\":\"f32\",\"dims\":{\"rows\":4,"
                  "\"dim\":64}}' --strategy anneling",
                  &out) == 2);
  CHECK_THAT(out, Catch::Contains("unknown strategy 'anneling' (did you mean 'annealing'?)"));
  CHECK(run_ktune("compile --arch sm_99", &out) == 2);
  CHECK_THAT(out, Catch::Contains("unknown architecture 'sm_99'") && Catch::Contains("sm_90"));
  CHECK(run_ktune("render --family adamw --problem '{\"dtype\":\"f64\",\"dims\":{\"tensors\":1,\"numel\":4}}'",
                  &out) == 2);
  CHECK_THAT(out, Catch::Contains("accepted: f32"));
  CHECK(run_ktune("bench adam --tensors 1,x", &out) == 2);
  CHECK(run_ktune("frobnicate", &out) == 2);
  // A mistyped family is named before anything else is asked for.
  CHECK(run_ktune("tune --family nope", &out) == 2);
  CHECK_THAT(out, Catch::Contains("unknown family 'nope'"));
  CHECK(run_ktune("tune --family adamw", &out) == 2);
  CHECK_THAT(out, Catch::Contains("--family needs --problem"));
  // Counts name their bound as an integer.
  CHECK(run_ktune("eval --backend cpu --model tiny --ctx 0", &out) == 2);
  CHECK_THAT(out, Catch::Contains("--ctx: must be an integer >= 1, got '0'"));
  CHECK(run_ktune("bench e2e --backend cpu --model tiny --warmup -1", &out) == 2);
  CHECK_THAT(out, Catch::Contains("--warmup: must be an integer >= 0, got '-1'"));
}

TEST_CASE("CLI: a bad KTUNE_EMU_SCHEDULE, KTUNE_EMU_HANG_SECONDS, KTUNE_HOST_CXX or KTUNE_COMPILE_THREADS stops a run "
          "in one line, exit 2",
          "[cli]") {
  std::string out;
  CHECK(run_command("KTUNE_EMU_SCHEDULE=sideways " + ktune_exe().string() +
                        " run --backend emu --family adamw --problem "
                        "'{\"dtype\":\"f32\",\"dims\":{\"tensors\":1,\"numel\":64}}'",
                    &out) == 2);
  CHECK(out == "ktune: KTUNE_EMU_SCHEDULE must be in-order, reverse or shuffle[:SEED], got 'sideways'\n");
  CHECK(run_command("KTUNE_EMU_HANG_SECONDS=-1 " + ktune_exe().string() +
                        " run --backend emu --family adamw --problem "
                        "'{\"dtype\":\"f32\",\"dims\":{\"tensors\":1,\"numel\":64}}'",
                    &out) == 2);
  CHECK(out == "ktune: KTUNE_EMU_HANG_SECONDS must be an integer in 0..86400 (0: never), got '-1'\n");
  // A host compiler that is not there is the setting's fault, not a variant's (was a FAIL, exit 1).
  for (const std::string cxx : {"/nonexistent/g++", "no-such-compiler++"}) {
    CHECK(run_command("KTUNE_HOST_CXX=" + cxx + " " + ktune_exe().string() + " run --backend emu --family adamw "
                          "--problem '{\"dtype\":\"f32\",\"dims\":{\"tensors\":1,\"numel\":64}}'",
                      &out) == 2);
    CHECK_THAT(out, Catch::StartsWith("ktune: KTUNE_HOST_CXX '" + cxx + "' is no executable here"));
    CHECK(std::count(out.begin(), out.end(), '\n') == 1);
  }
  // Before any progress line.
  CHECK(run_command("KTUNE_COMPILE_THREADS=0 " + ktune_exe().string() + " compile --family rmsnorm_fwd", &out) == 2);
  CHECK(out == "ktune: KTUNE_COMPILE_THREADS must be in 1..1024, got 0\n");
  // CUDA headers that are not there failed every compile, as many failures.
  CHECK(run_command("KTUNE_CUDA_INCLUDE=/nonexistent " + ktune_exe().string() +
                        " compile --family rmsnorm_fwd --no-cache",
                    &out) == 2);
  CHECK_THAT(out, Catch::StartsWith("ktune: KTUNE_CUDA_INCLUDE=/nonexistent is no folder"));
  CHECK(std::count(out.begin(), out.end(), '\n') == 1);
  // --no-cache keeps away from the cache folder: one that is a file stops only a run that uses it.
  const auto not_a_folder = ktune::test::scratch_dir("cli-no-cache-folder") / "a-file";
  std::ofstream(not_a_folder) << "x";
  const std::string in_file = "KTUNE_CACHE_DIR=" + not_a_folder.string() + " " + ktune_exe().string() +
                              " compile --family prim_neg --arch sm_80";
  CHECK(run_command(in_file + " --no-cache 2>&1", &out) == 0);
  CHECK(run_command(in_file + " 2>&1", &out) == 2);
  // tune compiles ahead of its runner with as many (--threads says otherwise).
  const auto cache = ktune::test::scratch_dir("cli-compile-threads") / "tuned.json";
  for (const std::string bad : {"abc", "' 4'"}) {
    CHECK(run_command("KTUNE_COMPILE_THREADS=" + bad + " " + ktune_exe().string() +
                          " tune --backend emu --family prim_neg --problem '{\"dtype\":\"f32\",\"dims\":{\"n\":64}}' "
                          "--budget 1 --cache " + cache.string(),
                      &out) == 2);
    CHECK_THAT(out, Catch::StartsWith("ktune: KTUNE_COMPILE_THREADS must be an integer in 1..1024, got '"));
  }
  CHECK_FALSE(std::filesystem::exists(cache));
}

TEST_CASE("CLI: without a device, GPU commands say so in one line and exit 2", "[cli]") {
  std::string out;
  CHECK(run_command("KTUNE_NO_DEVICE=1 " + ktune_exe().string() + " devices", &out) == 2);
  CHECK(out == "ktune: no CUDA device: KTUNE_NO_DEVICE is set\n");
  // Machine-readable even then: an empty list, the reason beside it.
  CHECK(run_command("KTUNE_NO_DEVICE=1 " + ktune_exe().string() + " --json devices", &out) == 2);
  CHECK_THAT(out, Catch::StartsWith("[]\n") && Catch::Contains("ktune: no CUDA device: "));
  const auto dir = ktune::test::scratch_dir("cli");
  const auto cache = (dir / "tuned.json").string();
  CHECK(run_command("KTUNE_NO_DEVICE=1 " + ktune_exe().string() +
                        " tune --family adamw --problem '{\"dtype\":\"f32\",\"dims\":{\"tensors\":1,\"numel\":64}}' "
                        "--cache " + cache, &out) == 2);
  // A command that takes --backend says what runs without a device.
  CHECK(out == "ktune: no CUDA device: KTUNE_NO_DEVICE is set; --backend emu runs it without one, on the CPU under "
               "the host emulation\n");
  CHECK_FALSE(std::filesystem::exists(cache));  // nothing written
  CHECK(run_command("KTUNE_NO_DEVICE=1 " + ktune_exe().string() + " bench adam", &out) == 2);
}

TEST_CASE("CLI: --json is taken before or after the subcommand, giving the same JSON", "[cli]") {
  for (const std::string args : {"families", "bench memory --model tiny --ctx 8,16", "render --family adamw --space"}) {
    INFO(args);
    std::string before, after;
    REQUIRE(run_ktune("--json " + args, &before) == 0);
    REQUIRE(run_ktune(args + " --json", &after) == 0);
    CHECK(nlohmann::json::parse(before) == nlohmann::json::parse(after));
  }
  std::string out;
  REQUIRE(run_ktune("bench precision --help", &out) == 0);
  CHECK_THAT(out, Catch::Contains("--json, before or after the subcommand"));
  // An option no command knows is still refused, in one line.
  CHECK(run_ktune("families --frobnicate", &out) == 2);
  CHECK(std::count(out.begin(), out.end(), '\n') == 1);
  CHECK(out == "ktune: unknown option '--frobnicate' of families (see --help)\n");
  // A slip in an option's name is answered with the option meant, the command's or ktune's own.
  CHECK(run_ktune("tune --backend emu --famly rmsnorm_fwd", &out) == 2);
  CHECK(out == "ktune: unknown option '--famly' of tune (did you mean '--family'?) (see --help)\n");
  CHECK(run_ktune("families --jsn", &out) == 2);
  CHECK_THAT(out, Catch::Contains("(did you mean '--json'?)"));
  // An option given twice is said so, not in the parser's words ("At Most 1 required but received 2").
  CHECK(run_ktune("train --steps 2 --steps 3", &out) == 2);
  CHECK(out == "ktune: --steps is given 2 times; give it once (see --help)\n");
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
  CHECK_THAT(out, Catch::Contains("invalid (constraints)") && !Catch::Contains("skipped"));
  REQUIRE(run_ktune("--json compile --family adamw_eager --arch sm_90", &out) == 0);
  const auto j = nlohmann::json::parse(out.substr(out.find('{')));
  CHECK(j["failures"] == 0);
}

TEST_CASE("CLI: compile into a binary cache that cannot be written compiles, warns once, and keeps nothing",
          "[cli]") {
  // The cache's folder taken by a file: as a read-only mount or a full disk, where not even root may write.
  const auto dir = ktune::test::scratch_dir("cli-compile-unwritable");
  std::ofstream(dir / "cubin") << "not a folder";
  const std::string compile = "KTUNE_CACHE_DIR=" + dir.string() + " " + ktune_exe().string() + " ";
  std::string out, err;
  REQUIRE(run_command("{ " + compile + "compile --family adamw_single --arch sm_80 2>/dev/null; }", &out) == 0);
  CHECK_THAT(out, Catch::Contains("compiled 2 variants") && Catch::Contains("0 failures") &&
                      !Catch::Contains("FAIL"));
  REQUIRE(run_command("{ " + compile + "compile --family adamw_single --arch sm_80 >/dev/null; }", &err) == 0);
  CHECK_THAT(err, Catch::Contains("\nwarning: the binary cache did not keep 2 compiled sources (cannot write file " +
                                  (dir / "cubin").string() + "/") &&
                      Catch::EndsWith("); the next run compiles them again (KTUNE_CACHE_DIR names another folder "
                                      "for it)\n"));
  CHECK(ktune::read_file(dir / "cubin") == "not a folder");
  REQUIRE(run_command("{ " + compile + "--json compile --family adamw_single --arch sm_80 2>/dev/null; }", &out) == 0);
  const auto j = nlohmann::json::parse(out);
  CHECK(j["failures"] == 0);
  CHECK(j["not_stored"] == 2);
  // Where it can write, it keeps them and says nothing.
  REQUIRE(run_command("{ KTUNE_CACHE_DIR=" + (dir / "writable").string() + " " + ktune_exe().string() +
                          " --json compile --family adamw_single --arch sm_80; }",
                      &out) == 0);
  CHECK(nlohmann::json::parse(out.substr(out.find('{')))["not_stored"] == 0);
  CHECK_THAT(out, !Catch::Contains("warning"));
}

TEST_CASE("CLI: compile stopped by a signal says whether what it compiled is kept", "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-compile-stopped");
  // Every variant, one at a time, into the binary cache of `cache_dir`, stopped by SIGTERM once `until` holds:
  // its exit code, and its stderr in `err`.
  const auto stopped = [&](const std::filesystem::path& cache_dir, const std::string& flags, const std::string& err,
                           const std::string& until) {
    std::string out;
    return run_command("(KTUNE_CACHE_DIR=" + cache_dir.string() + " " + ktune_exe().string() + " compile --all " +
                           flags + "--arch sm_90 --threads 1 2> " + (dir / err).string() + " >/dev/null & pid=$!; " +
                           ktune::test::wait_while_running(until) + "kill -TERM $pid; wait $pid)",
                       &out);
  };
  const std::string counting = "grep -q ' sources (' ";  // its progress counts sources
  // Into an empty binary cache: stopped once the first is in it.
  CHECK(stopped(dir, "", "err", "ls " + (dir / "cubin").string() + " 2>/dev/null | grep -q '[.]cubin$'") == 128 + 15);
  CHECK_THAT(ktune::read_file(dir / "err"),
             Catch::EndsWith("ktune: stopped at once: the variants compiled so far are kept in the binary cache, and "
                             "the same command goes on from them\n"));
  // --no-cache keeps nothing, and says so.
  CHECK(stopped(dir, "--no-cache ", "err-uncached", counting + (dir / "err-uncached").string()) == 128 + 15);
  CHECK_THAT(ktune::read_file(dir / "err-uncached"),
             Catch::EndsWith("ktune: stopped at once (--no-cache: nothing compiled is kept)\n"));
  // Nor does a cache whose folder cannot be written (taken by a file, as a read-only mount or a full disk).
  std::filesystem::create_directories(dir / "unwritable");
  std::ofstream(dir / "unwritable" / "cubin") << "not a folder";
  CHECK(stopped(dir / "unwritable", "", "err-unwritable", counting + (dir / "err-unwritable").string()) == 128 + 15);
  CHECK_THAT(ktune::read_file(dir / "err-unwritable"),
             Catch::EndsWith("ktune: stopped at once (the binary cache's folder cannot be written: nothing compiled "
                             "is kept)\n"));
}

namespace {
// Exit code of `ktune args` and its stderr, which must be one line when it fails with 2.
int run_bad(const std::string& args, std::string* err) {
  const int code = run_command("{ " + ktune_exe().string() + " " + args + " >/dev/null; }", err);
  if (code == 2) CHECK(err->find('\n') + 1 == err->size());
  return code;
}
}  // namespace

TEST_CASE("CLI: thread and worker counts are bounded, 0 is never a silent default", "[cli]") {
  std::string out;
  CHECK(run_bad("compile --family adamw_single --threads 2000", &out) == 2);
  CHECK_THAT(out, Catch::Contains("--threads") && Catch::Contains("1..1024"));
  CHECK(run_bad("compile --family adamw_single --threads 0", &out) == 2);
  CHECK(run_bad("train --model tiny --steps 1 --threads 0", &out) == 2);
  CHECK(run_bad("bench e2e --model tiny --ctx 8 --threads 5000", &out) == 2);
  CHECK_THAT(out, Catch::Contains("1..1024"));
  CHECK(run_bad("bench memory --model tiny --threads 0", &out) == 2);
  // The emulation's workers go through the same bound.
  CHECK(run_bad("bench emu --workers 5000 --blocks 1 --block-threads 32 --barriers 1", &out) == 2);
  CHECK_THAT(out, Catch::Contains("--workers"));
  // Its blocks are host memory and its barriers an int loop count: bounded before either is sized.
  CHECK(run_bad("bench emu --blocks 4000000000 --barriers 2", &out) == 2);
  CHECK_THAT(out, Catch::Contains("--blocks") && Catch::Contains("1..65535"));
  CHECK(run_bad("bench emu --blocks 1 --block-threads 32 --barriers 3000000000", &out) == 2);
  CHECK_THAT(out, Catch::Contains("--barriers") && Catch::Contains("1..10000000"));
}

TEST_CASE("CLI: a thread the system refuses is a clear error, not a hang", "[cli]") {
  std::string out;
  // 1024 threads' stacks do not fit in 3 GB of address space.
  const int code = run_command("ulimit -v 3000000; timeout 120 " + ktune_exe().string() +
                                   " compile --family adamw_single --arch sm_80 --threads 1024 --no-cache",
                               &out);
  CHECK(code == 2);
  CHECK_THAT(out, Catch::Contains("cannot start 1024 threads"));
}

TEST_CASE("CLI: garbage values are refused where the option is declared", "[cli]") {
  std::string out;
  for (const char* args :
       {"train --ctx 0", "train --batch 0", "train --heads 0", "train --d-model 0", "train --layers 0",
        "train --vocab 0", "train --d-ff -4", "train --steps -3", "train --steps 0", "train --lr nan",
        "train --lr -1", "train --beta2 5", "train --beta1 1", "train --eps 0", "train --weight-decay inf",
        "train --resume", "train --checkpoint-every 5", "train --warmup-steps -1", "train --lr-schedule linear",
        "train --min-lr 1e-4", "train --lr-schedule cosine --cosine-steps 0",
        "train --lr-schedule cosine --steps 3 --warmup-steps 3", "train --eval-every -1", "train --eval-batches 0",
        "train --val-tokens v.u16", "train --accumulate 0", "train --val-split 0.1", "train --save-best b.st",
        "train --tokens t.u16 --eval-every 5 --val-split 0", "eval --tokens t.u16 --val-split 1.5", "generate",
        "generate --prompt x", "eval --all", "eval --tokens t.u16 --all --batches 2",
        "generate --prompt 1 2 --top-p 0", "generate --prompt 1 -2", "generate --prompt 1 --max-tokens 0",
        "generate --prompt 1 --eos -1", "generate --prompt 1 --temperature -0.5", "eval --batches 0",
        "eval --batches 2 --dump g.json",
        "eval --ctx 0", "bench e2e --batch 0", "bench e2e --trials 0", "bench memory --heads 0",
        "compile --sample 0", "replay --dataset x.json --target 2", "replay --dataset x.json --target nan",
        "replay --dataset x.json --runs 0", "train --seed -1", "eval --seed -2", "generate --prompt 1 --seed -1",
        "tune --seed -1", "compile --seed -1"}) {
    INFO(args);
    CHECK(run_bad(args, &out) == 2);
    CHECK_THAT(out, !Catch::Contains("json.exception"));
  }
  CHECK_THAT(out, Catch::Contains("--seed: must be an integer >= 0, got '-1'"));
  CHECK(run_bad("replay --dataset " + std::string(KTUNE_SOURCE_DIR) + "/README.md --runs 0", &out) == 2);
  CHECK_THAT(out, Catch::Contains("--runs"));
  CHECK(run_bad("train --beta2 5", &out) == 2);
  CHECK_THAT(out, Catch::Contains("[0, 1)"));
  // A case the attention benchmark does not have, before the device is asked for.
  CHECK(run_bad("bench attention --tables leaderboard,seed004", &out) == 2);
  CHECK_THAT(out, Catch::Contains("seed004") && Catch::Contains("causal_fwd_d128"));
  CHECK(run_bad("bench attention --tables seed003,", &out) == 2);  // a list with an item left out, as everywhere
  CHECK_THAT(out, Catch::Contains("--tables has an empty item in 'seed003,'"));
}

TEST_CASE("CLI: JSON errors in --problem and --config carry no exception id and a short excerpt", "[cli]") {
  std::string out;
  CHECK(run_bad("render --family adamw --problem '{\"dtype\": \"f32\",'", &out) == 2);
  CHECK_THAT(out, Catch::Contains("--problem is not valid JSON") && !Catch::Contains("json.exception") &&
                      Catch::Contains("; give it as JSON, e.g. '{\"dims\":{\"numel\":"));
  CHECK(run_bad("run --backend emu --family adamw --parameters '{lr: 1}'", &out) == 2);
  CHECK_THAT(out, Catch::Contains("--parameters is not valid JSON") && Catch::Contains("e.g. '{\"beta1\":0.9}'"));
  CHECK(run_bad("run --backend emu --family swiglu_fwd --parameters '{x'", &out) == 2);
  CHECK_THAT(out, Catch::Contains("; swiglu_fwd takes no parameters: leave --parameters out"));
  const auto spec_dir = ktune::test::scratch_dir("cli-bad-spec-json");
  std::ofstream(spec_dir / "k.json") << "{\"name\": \"k\",\n \"source\" \"k.cu\"}";
  CHECK(run_bad("render --spec " + (spec_dir / "k.json").string(), &out) == 2);
  CHECK_THAT(out, Catch::Contains("kernel spec " + (spec_dir / "k.json").string() + " is not valid JSON") &&
                      Catch::Contains("line 2") && Catch::Contains("docs/kernel-spec.md gives the format"));
  const std::string long_text(5000, 'x');
  CHECK(run_bad("render --family adamw --config '{\"threads\": \"" + long_text + "'", &out) == 2);
  CHECK(out.size() < 400);
}

TEST_CASE("CLI: --problem without a dtype takes the first problem class's, and dims alone are the dims", "[cli]") {
  // The JSON of each form, as render --space prints the problem it was given.
  const auto problem_of = [](const std::string& json) {
    std::string out;
    const int rc = run_command(ktune_exe().string() + " render --family rmsnorm_fwd --space --problem '" + json +
                                   "' 2>&1",
                               &out);
    return std::pair{rc, out};
  };
  const auto [full_rc, full] = problem_of(R"({"dtype":"f32","dims":{"rows":5,"dim":96}})");
  REQUIRE(full_rc == 0);
  CHECK(problem_of(R"({"rows":5,"dim":96})") == std::pair{0, full});
  CHECK(problem_of(R"({"dims":{"rows":5,"dim":96}})") == std::pair{0, full});
  CHECK(problem_of(R"({"dtype":"bf16","dims":{"rows":5,"dim":96}})").second != full);
  // What is neither form is still refused, named.
  const auto [rc, out] = problem_of(R"({"dims":{"rows":5,"dim":96},"x":1})");
  CHECK(rc == 2);
  CHECK_THAT(out, Catch::Contains("unknown key 'x'"));
  CHECK(problem_of(R"({"rows":5,"dim":"wide"})").first == 2);
  // The error names the short form too.
  CHECK_THAT(problem_of(R"({"dtype":"bf16","rows":5,"dim":96})").second,
             Catch::Contains("unknown key 'dim'") && Catch::Contains("or the dims alone"));
  // A spec's dimension may be called "dims": the wrapper's is an object.
  const auto dir = ktune::test::scratch_dir("cli-problem-dims");
  const std::filesystem::path example = std::filesystem::path(KTUNE_SOURCE_DIR) / "examples/reduction";
  std::filesystem::copy_file(example / "reduction.cu", dir / "reduction.cu");
  std::string spec = ktune::read_file(example / "reduction.json");
  for (std::size_t at; (at = spec.find("cols")) != std::string::npos;) spec.replace(at, 4, "dims");
  std::ofstream(dir / "reduction.json") << spec;
  std::string listed;
  CHECK(run_command(ktune_exe().string() + " render --space --spec " + (dir / "reduction.json").string() +
                        " --problem '{\"rows\":16,\"dims\":1020}' 2>&1",
                    &listed) == 0);
  CHECK_THAT(listed, Catch::Contains("dims=1020"));
}

TEST_CASE("CLI: output files are checked before the work: unwritable is exit 2, nothing done", "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-out");
  std::ofstream(dir / "plain") << "x";
  const std::string bad = (dir / "plain" / "sub" / "r.json").string();
  std::string out;
  CHECK(run_bad("bench e2e --model tiny --ctx 8 --batch 1 --trials 1 --json-out " + bad, &out) == 2);
  CHECK_THAT(out, Catch::Contains("--json-out"));
  // Before the device is even looked for.
  CHECK(run_command("KTUNE_NO_DEVICE=1 " + ktune_exe().string() + " bench adam --json-out " + bad, &out) == 2);
  CHECK_THAT(out, Catch::Contains("--json-out") && !Catch::Contains("no CUDA device"));
  CHECK(run_bad("train --model tiny --steps 1 --save " + bad, &out) == 2);
  CHECK(run_bad("train --model tiny --steps 1 --checkpoint " + bad, &out) == 2);
  CHECK_THAT(out, Catch::Contains("--checkpoint"));
  CHECK(run_bad("eval --model tiny --dump " + bad, &out) == 2);
  // tune checks its cache before the search, so a winner is never lost to it.
  CHECK(run_bad("tune --backend emu --family adamw --problem '{\"dtype\":\"f32\",\"dims\":{\"tensors\":1,"
                "\"numel\":64}}' --cache " + bad, &out) == 2);
  CHECK_THAT(out, Catch::Contains("cannot write cache file"));
  CHECK(run_bad("tune --backend emu --family adamw --problem '{\"dtype\":\"f32\",\"dims\":{\"tensors\":1,"
                "\"numel\":64}}' --cache " + dir.string(), &out) == 2);
  CHECK_THAT(out, Catch::Contains("is a directory"));
  CHECK_FALSE(std::filesystem::exists(dir.string() + ".lock"));
  // A folder's name ("out/"), whether or not it exists yet: refused at once, not after the run, and none made.
  for (const char* option : {"--save", "--checkpoint", "--metrics"}) {
    INFO(option);
    CHECK(run_bad(fmt::format("train --model tiny --steps 1 {} {}/new/", option, dir.string()), &out) == 2);
    CHECK_THAT(out, Catch::Contains(fmt::format("cannot write {}", option)) &&
                        Catch::Contains("it names a folder (it ends with '/')"));
    CHECK_FALSE(std::filesystem::exists(dir / "new"));
  }
  // A folder where no file can be made, though access() lets root write anywhere.
  if (std::filesystem::is_directory("/proc/self")) {
    CHECK(run_bad("train --model tiny --steps 1 --save /proc/ktune-weights.safetensors", &out) == 2);
    CHECK_THAT(out, Catch::Contains("cannot write --save /proc/ktune-weights.safetensors: cannot make a file in "
                                    "folder /proc"));
  }
}

TEST_CASE("CLI: input files are checked before the work: a missing one is exit 2 naming its option", "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-in");
  const std::string missing = (dir / "missing").string();
  std::string out;
  for (const std::string args :
       {"train --model tiny --steps 1 --weights ", "train --model tiny --steps 1 --tokens ",
        "train --model tiny --steps 1 --eval-every 1 --val-tokens ", "eval --model tiny --weights ",
        "eval --model tiny --tokens ", "generate --model tiny --prompt 1 --weights "}) {
    INFO(args);
    CHECK(run_bad(args + missing, &out) == 2);
    const std::string option = args.substr(args.rfind(" --") + 1, args.size() - args.rfind(" --") - 2);
    CHECK_THAT(out, Catch::Contains(option + ": " + missing + " does not exist"));
    CHECK(run_bad(args + dir.string(), &out) == 2);  // a folder is not a file
    CHECK_THAT(out, Catch::Contains(dir.string() + " is a folder, not a file"));
  }
}

TEST_CASE("CLI: a model that does not fit in host memory is refused before allocating", "[cli]") {
  std::string out;
  for (const char* args : {"train --model xl --ctx 100000 --steps 1", "eval --model xl --ctx 100000",
                           "bench e2e --model xl --ctx 100000 --trials 1"}) {
    INFO(args);
    CHECK(run_bad(args, &out) == 2);
    CHECK_THAT(out, Catch::Contains("needs") && Catch::Contains("bytes") && Catch::Contains("available"));
  }
}

TEST_CASE("CLI: cache commands on missing or bad inputs: exit 2 or 1, one line, nothing written", "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-cache");
  const auto golden = std::filesystem::path(KTUNE_SOURCE_DIR) / "tests/cache/golden/tuned_v1.json";
  const std::string missing = (dir / "missing.json").string();
  const std::string into = (dir / "t.json").string();
  std::string out;
  CHECK(run_bad("cache show " + missing, &out) == 2);
  CHECK_THAT(out, Catch::Contains("does not exist"));
  CHECK(run_bad("cache export " + missing + " --out " + into, &out) == 2);
  CHECK(run_bad("cache prune " + missing, &out) == 2);
  CHECK(run_bad("cache merge " + golden.string() + " " + missing + " --into " + into, &out) == 2);
  CHECK_FALSE(std::filesystem::exists(into));
  CHECK_FALSE(std::filesystem::exists(into + ".lock"));
  CHECK_FALSE(std::filesystem::exists(missing + ".lock"));
  // All or nothing: a bad second input leaves the target as it was (here: absent).
  std::ofstream(dir / "bad.json") << "{\"format\": 5}";
  CHECK(run_ktune("cache merge " + golden.string() + " " + (dir / "bad.json").string() + " --into " + into, &out) ==
        2);
  CHECK_THAT(out, Catch::Contains("not a ktune tuned cache") && !Catch::Contains("json.exception"));
  CHECK_FALSE(std::filesystem::exists(into));
  // Merging a file into its own copy adds nothing.
  std::filesystem::copy_file(golden, dir / "copy.json");
  REQUIRE(run_ktune("cache merge " + golden.string() + " --into " + (dir / "copy.json").string(), &out) == 0);
  CHECK_THAT(out, Catch::Contains("2 entries; in " + (dir / "copy.json").string() +
                                   ": 0 added, 0 replaced, 2 left as they were\n"));
  // --json answers in JSON there too.
  REQUIRE(run_ktune("--json cache merge " + golden.string() + " --into " + (dir / "copy.json").string(), &out) == 0);
  const auto merged = nlohmann::json::parse(out);
  CHECK(merged["inputs"][0]["entries"] == 2);
  CHECK(merged["inputs"][0]["changed"] == 0);
  CHECK(merged["inputs"][0]["kept"] == 2);
  // A merge says which of its keys it added and which it replaced.
  auto faster = nlohmann::json::parse(ktune::read_file(golden));
  for (auto& e : faster["entries"]) {
    e["time_ms"] = e["time_ms"].get<double>() / 2;
    e["p20_ms"] = e["p20_ms"].get<double>() / 2;
    e["p80_ms"] = e["p80_ms"].get<double>() / 2;
  }
  faster["entries"][1]["key"]["gpu_name"] = "NVIDIA H200";  // another GPU: a key of its own
  std::ofstream(dir / "faster.json") << faster.dump();
  REQUIRE(run_ktune("cache merge " + (dir / "faster.json").string() + " --into " + (dir / "copy.json").string(),
                    &out) == 0);
  CHECK_THAT(out, Catch::Contains(": 1 added, 1 replaced\n"));
  REQUIRE(run_ktune("--json cache prune " + (dir / "copy.json").string(), &out) == 0);
  CHECK(nlohmann::json::parse(out)["dropped"] == 0);
}

TEST_CASE("CLI: --json names a file whose name is not UTF-8 with U+FFFD for its bad bytes, after the work done",
          "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-json-latin1");
  const auto golden = std::filesystem::path(KTUNE_SOURCE_DIR) / "tests/cache/golden/tuned_v1.json";
  const std::string into = (dir / "caf\xe9.json").string();  // Latin-1's e acute, a byte no UTF-8 text starts with
  std::string out;
  // Its JSON said "internal error: invalid UTF-8 byte", exit 1, once the merge had written the file.
  REQUIRE(run_command("{ " + ktune_exe().string() + " --json cache merge " + golden.string() + " --into '" + into +
                          "' 2>/dev/null; }",
                      &out) == 0);
  CHECK(std::filesystem::exists(into));
  const auto merged = nlohmann::json::parse(out);
  CHECK(merged["into"] == (dir / "caf\xef\xbf\xbd.json").string());
  CHECK(merged["inputs"][0]["changed"] == 2);
  REQUIRE(run_command("{ " + ktune_exe().string() + " --json cache prune '" + into + "' 2>/dev/null; }", &out) == 0);
  CHECK(nlohmann::json::parse(out)["dropped"] == 0);
  // A kernel spec's source with such a byte in a comment, which NVRTC and the host compiler take: render --json
  // said "invalid UTF-8 byte", exit 1.
  const auto example = std::filesystem::path(KTUNE_SOURCE_DIR) / "examples/vector_add";
  for (const auto* name : {"vector_add.json", "vector_add.cu"})
    std::filesystem::copy_file(example / name, dir / name, std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir / "vector_add.cu", std::ios::app) << "// caf\xe9\n";
  REQUIRE(run_command("{ " + ktune_exe().string() + " --json render --spec " + (dir / "vector_add.json").string() +
                          " 2>/dev/null; }",
                      &out) == 0);
  CHECK_THAT(nlohmann::json::parse(out)["source"].get<std::string>(), Catch::Contains("// caf\xef\xbf\xbd\n"));
}

TEST_CASE("CLI: cache export --out refuses a cache that holds entries, and says merge --into adds to one", "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-cache-export");
  const auto golden = std::filesystem::path(KTUNE_SOURCE_DIR) / "tests/cache/golden/tuned_v1.json";
  auto doc = nlohmann::json::parse(ktune::read_file(golden));
  doc["entries"].erase(1);  // a live cache of one entry
  const auto live = dir / "live.json";
  ktune::write_file_atomic(live, doc.dump());
  const std::string before = ktune::read_file(live);
  std::string out;
  CHECK(run_ktune("cache export " + golden.string() + " --out " + live.string() + " 2>&1", &out) == 2);
  CHECK_THAT(out, Catch::Contains("--out " + live.string() + " already holds 1 cache entry") &&
                      Catch::Contains("cache merge --into " + live.string()));
  CHECK(std::count(out.begin(), out.end(), '\n') == 1);
  CHECK(ktune::read_file(live) == before);
  CHECK_FALSE(std::filesystem::exists(live.string() + ".lock"));
  // A new file, or a cache with no entries, takes the copy.
  REQUIRE(run_ktune("cache export " + golden.string() + " --out " + (dir / "new.json").string(), &out) == 0);
  CHECK(nlohmann::json::parse(ktune::read_file(dir / "new.json"))["entries"].size() == 2);
  doc["entries"] = nlohmann::json::array();
  ktune::write_file_atomic(dir / "empty.json", doc.dump());
  REQUIRE(run_ktune("cache export " + golden.string() + " --out " + (dir / "empty.json").string(), &out) == 0);
  CHECK(nlohmann::json::parse(ktune::read_file(dir / "empty.json"))["entries"].size() == 2);
  // "-" and /dev/stdout are stdout, as no --out is.
  std::string to_stdout;
  REQUIRE(run_ktune("cache export " + golden.string(), &to_stdout) == 0);
  for (const char* out_arg : {"-", "/dev/stdout"}) {
    INFO(out_arg);
    REQUIRE(run_ktune("cache export " + golden.string() + " --out " + out_arg, &out) == 0);
    CHECK(out == to_stdout);
  }
}

TEST_CASE("CLI: --help lists the families and strategies an option takes", "[cli]") {
  std::string out;
  for (const char* cmd : {"run", "render", "tune", "compile"}) {
    INFO(cmd);
    REQUIRE(run_ktune(std::string(cmd) + " --help", &out) == 0);
    CHECK_THAT(out, Catch::Contains("rmsnorm_fwd") && Catch::Contains("attention_fwd"));
  }
  for (const char* cmd : {"replay", "tune"}) {
    INFO(cmd);
    REQUIRE(run_ktune(std::string(cmd) + " --help", &out) == 0);
    CHECK_THAT(out, Catch::Contains("genetic") && Catch::Contains("bayes_opt"));
  }
}

TEST_CASE("CLI: the problem run --help gives as an example is one a family takes", "[cli]") {
  std::string out;
  REQUIRE(run_ktune("run --help", &out) == 0);
  const auto lines = lines_starting(out, "  --problem ");
  REQUIRE(lines.size() == 1);
  const auto open = lines[0].find("'{"), close = lines[0].find("}'", open);
  REQUIRE(open != std::string::npos);
  REQUIRE(close != std::string::npos);
  const auto problem =
      ktune::templates::Problem::from_json(nlohmann::json::parse(lines[0].substr(open + 1, close - open)));
  std::vector<std::string> taken_by;
  for (const auto* family : ktune::templates::all_families()) {
    try {
      family->check(problem);
      taken_by.push_back(family->name());
    } catch (const std::exception&) {
    }
  }
  INFO(lines[0]);
  CHECK_FALSE(taken_by.empty());
}

TEST_CASE("CLI: a problem missing a dimension says so and names the family's dims", "[cli]") {
  std::string out;
  CHECK(run_bad("render --family adamw --problem '{\"dtype\":\"f32\",\"dims\":{\"numel\":64}}'", &out) == 2);
  CHECK_THAT(out, Catch::Contains("dimension 'tensors' is missing") && Catch::Contains("adamw's dims: numel, tensors"));
  CHECK_THAT(out, !Catch::Contains("must be in"));
  // The same check for every family, from one place: attention names its optional dim.
  CHECK(run_bad("run --family attention_fwd --problem '{\"dtype\":\"bf16\",\"dims\":{\"batch\":1,\"heads\":2,"
                "\"head_dim\":64,\"causal\":0}}'", &out) == 2);
  CHECK_THAT(out, Catch::Contains("'seq' is missing") && Catch::Contains("kv_heads (optional)"));
  CHECK(run_bad("render --family swiglu_fwd --problem '{\"dtype\":\"f32\",\"dims\":{}}'", &out) == 2);
  CHECK_THAT(out, Catch::Contains("swiglu_fwd: dimension 'n' is missing"));
  CHECK(run_bad("render --family adamw --problem '{\"dtype\":\"f32\",\"dims\":{\"tensors\":1,\"numel\":4,\"n\":2}}'",
                &out) == 2);
  CHECK_THAT(out, Catch::Contains("unknown dimension 'n'") && Catch::Contains("numel, tensors"));
  // Out of range is still said as a range.
  CHECK(run_bad("render --family adamw --problem '{\"dtype\":\"f32\",\"dims\":{\"tensors\":0,\"numel\":4}}'",
                &out) == 2);
  CHECK_THAT(out, Catch::Contains("must be in 1..4096"));
}

TEST_CASE("CLI: ktune families lists every family on one line with its dims and dtypes", "[cli]") {
  std::string out;
  REQUIRE(run_ktune("families", &out) == 0);
  for (const auto* f : ktune::templates::all_families()) {
    INFO(f->name());
    CHECK(lines_starting(out, "| " + f->name() + " ").size() == 1);
  }
  const auto adamw = lines_starting(out, "| adamw ");
  REQUIRE(adamw.size() == 1);
  CHECK_THAT(adamw[0], Catch::Contains("bf16, f32") && Catch::Contains("numel, tensors"));
  check_aligned(lines_starting(out, "|"));
  REQUIRE(run_ktune("--json families", &out) == 0);
  const auto j = nlohmann::json::parse(out);
  CHECK(j.size() == ktune::templates::all_families().size());
  CHECK(j[0].contains("dims"));
  // The run-time parameters a program gives at launch: AdamW's lr among them, none for RMSNorm.
  for (const auto& family : j) {
    if (family["family"] == "adamw") CHECK(family["parameters"]["lr"].get<double>() == 0.01);
    if (family["family"] == "rmsnorm_fwd") CHECK(family["parameters"].empty());
  }
}

TEST_CASE("CLI: render --space --problem counts the points valid for that problem", "[cli]") {
  using namespace ktune::templates;
  const Family& f = find_family("attention_fwd");
  const Problem p{"bf16", {{"batch", 1}, {"heads", 2}, {"seq", 128}, {"head_dim", 128}, {"causal", 1}}};
  const auto limits = DeviceLimits::for_arch("sm_80");
  std::uint64_t valid = 0;
  for (std::uint64_t i = 0; i < f.space().size(); ++i) valid += f.is_valid(f.space().at(i), p, limits) ? 1 : 0;
  REQUIRE(valid > 0);
  REQUIRE(valid < f.space().size());
  std::string out;
  REQUIRE(run_ktune("render --family attention_fwd --space --arch sm_80 --problem '" + p.to_json().dump() + "'",
                    &out) == 0);
  CHECK_THAT(out, Catch::Contains(std::to_string(valid) + " valid for " + p.key() + " on sm_80"));
  // Its default, then its candidates, which a tuning session measures first: a short sequence's (the default
  // three stages deep), the longest tiles first, the wgmma kernel's eight (two key tiles, each in turn and
  // overlapped, each with and without ping-pong), marked as not valid on sm_80, and FlashAttention-2's three.
  CHECK_THAT(out, Catch::Contains("default on sm_80: " + f.default_config(p).str() + "\n"));
  const auto candidates = f.candidates(p);
  REQUIRE(candidates.size() == 13);
  std::string listed = "candidates (a tuning session measures them right after the default):\n";
  int skipped = 0;
  for (const auto& c : candidates) {
    std::string why;
    const bool valid = f.is_valid(c, p, limits, &why);
    skipped += valid ? 0 : 1;
    listed += "  " + c.str() + (valid ? "" : " (skipped on sm_80: " + why + ")") + "\n";
  }
  CHECK(skipped == 8);
  CHECK(candidates[0] == with(f.default_config(p), {{"stages", 3}}));
  CHECK_THAT(out, Catch::Contains(listed));
  CHECK_THAT(out, Catch::Contains("not valid, e.g. mma 1: wgmma needs an sm_90 device"));
  REQUIRE(run_ktune("--json render --family attention_fwd --space --arch sm_80 --problem '" + p.to_json().dump() + "'",
                    &out) == 0);
  const auto j = nlohmann::json::parse(out);
  CHECK(j["valid"] == valid);
  CHECK(j["default"] == f.default_config(p).to_json());
  REQUIRE(j["candidates"].size() == candidates.size());
  CHECK(j["candidates"][1]["config"] == candidates[1].to_json());
  // Why the others are not valid, by reason, most configs first, each with one config's own words; all of them.
  std::uint64_t invalid = 0, previous = f.space().size();
  for (const auto& r : j["invalid_reasons"]) {
    invalid += r["configs"].get<std::uint64_t>();
    CHECK(r["configs"].get<std::uint64_t>() <= previous);
    previous = r["configs"].get<std::uint64_t>();
  }
  CHECK(invalid == f.space().size() - valid);
  // The run-time parameters a program gives at launch, at this problem's values: 1/sqrt(128).
  CHECK(static_cast<float>(j["parameters"]["scale"].get<double>()) == static_cast<float>(1 / std::sqrt(128.0)));
  REQUIRE(run_ktune("render --family adamw --space", &out) == 0);
  CHECK_THAT(out, Catch::Contains("run-time parameters (their values in checks and tuning; a program gives its own "
                                  "at launch):\n  beta1 = 0.9\n  beta2 = 0.999\n  eps = 1e-08\n  lr = 0.01\n  "
                                  "step = 3\n  weight_decay = 0.1\n"));
  // Those not valid on --arch are marked: FlashAttention-2's backward partition at 128-query tiles does not fit
  // the 99 KB of shared memory an sm_89 block may use.
  const Family& bwd = find_family("attention_bwd");
  const Problem leaderboard{"bf16", {{"batch", 1}, {"heads", 16}, {"seq", 16384}, {"head_dim", 64}, {"causal", 1}}};
  REQUIRE(run_ktune("render --family attention_bwd --space --arch sm_89 --problem '" + leaderboard.to_json().dump() +
                        "'",
                    &out) == 0);
  CHECK_THAT(out, Catch::Contains("  " + bwd.candidates(leaderboard)[1].str() + " (skipped on sm_89: ") &&
                      Catch::Contains("shared memory"));
}

TEST_CASE("CLI: --help shows every option's default", "[cli]") {
  struct Expect {
    const char* command;
    const char* option;
    const char* shown;
  };
  for (const Expect& e : {Expect{"run", "--workers", "=0"}, Expect{"run", "--arch", "=sm_90"},
                          Expect{"compile", "--threads", "=KTUNE_COMPILE_THREADS, else cores"},
                          Expect{"replay", "--target", "="}, Expect{"train", "--lr", "="},
                          Expect{"train", "--d-model", "=the model's"}, Expect{"bench e2e", "--warmup", "="},
                          Expect{"tune", "--log", "=$KTUNE_CACHE_DIR/sessions/"},
                          Expect{"log show", "--top", "=10"}, Expect{"run", "--timeout", "=none"},
                          Expect{"tune", "--repetitions", "=auto"}}) {
    INFO(e.command << " " << e.option);
    std::string out;
    REQUIRE(run_ktune(std::string(e.command) + " --help", &out) == 0);
    const auto lines = lines_starting(out, std::string("  ") + e.option + " ");
    REQUIRE(lines.size() == 1);
    CHECK_THAT(lines[0], Catch::Contains(e.shown));
  }
  std::string out;
  REQUIRE(run_ktune("tune --help", &out) == 0);
  CHECK_THAT(out, Catch::Contains("KTUNE_PRINT=quiet"));
}

TEST_CASE("CLI: compile shows progress, one row per family, every variant with --verbose", "[cli]") {
  std::string out;
  REQUIRE(run_ktune("compile --family adamw_single --family adamw_eager --arch sm_80", &out) == 0);
  CHECK_THAT(out, Catch::Contains("compiling for sm_80: "));  // progress (stderr, a line at a time here)
  CHECK(out.find('\r') == std::string::npos);
  const auto table = lines_starting(out, "|");
  CHECK(table.size() == 4);  // header, rule, two families
  check_aligned(table);
  CHECK_THAT(table[0], Catch::Contains("variants") && Catch::Contains("registers") && Catch::Contains("cached") &&
                           Catch::Contains("invalid (constraints)"));
  // Compiled once above: --verbose lists each variant, marked cached.
  REQUIRE(run_ktune("compile --family adamw_single --arch sm_80 --sample 3 --verbose", &out) == 0);
  const auto rows = lines_starting(out, "| adamw_single ");
  CHECK(rows.size() >= 2);
  check_aligned(lines_starting(out, "|"));
  CHECK_THAT(out, Catch::Contains("(default)") && Catch::Contains("ok (cached)"));
}

TEST_CASE("CLI: cache show sizes its columns to the content and says the file's size", "[cli]") {
  const auto golden = std::filesystem::path(KTUNE_SOURCE_DIR) / "tests/cache/golden/tuned_v1.json";
  std::string out;
  REQUIRE(run_ktune("cache show " + golden.string(), &out) == 0);
  check_aligned(lines_starting(out, "|"));
  CHECK_THAT(out, Catch::Contains("2 of 2 entries in " + golden.string() + " (") && Catch::Contains(" KB)"));
  CHECK_THAT(out, !Catch::Contains("| nvrtc") && !Catch::Contains("2025-01-01"));  // no two entries of one key
}

TEST_CASE("CLI: cache show tells apart the entries of one key by the NVRTC, driver and date prune acts on", "[cli]") {
  const auto golden = std::filesystem::path(KTUNE_SOURCE_DIR) / "tests/cache/golden/tuned_v1.json";
  auto doc = nlohmann::json::parse(ktune::read_file(golden));
  nlohmann::json other = doc["entries"][0];  // the first entry's problem, measured under another driver later
  other["key"]["driver_version"] = "13010";
  other["date"] = "2026-02-03T04:05:06Z";
  doc["entries"].push_back(other);
  const auto dir = ktune::test::scratch_dir("cli-cache-show-versions");
  ktune::write_file_atomic(dir / "c.json", doc.dump());
  std::string out;
  REQUIRE(run_ktune("cache show " + (dir / "c.json").string(), &out) == 0);
  INFO(out);
  const auto table = lines_starting(out, "|");
  check_aligned(table);
  REQUIRE(table.size() == 5);
  CHECK_THAT(table[0], Catch::Contains("| nvrtc ") && Catch::Contains("| driver ") && Catch::Contains("| date "));
  const auto rows_with = [&](const std::string& text) {
    return std::count_if(table.begin(), table.end(), [&](const std::string& l) { return l.find(text) != l.npos; });
  };
  CHECK(rows_with("| 13010 ") == 1);
  CHECK(rows_with("| 13000 ") == 2);
  CHECK(rows_with("2026-02-03T04:05:06Z") == 1);
  CHECK(rows_with("| 13.0 ") == 3);
  // prune drops the older of the two and names it.
  REQUIRE(run_ktune("cache prune " + (dir / "c.json").string(), &out) == 0);
  CHECK(out == (dir / "c.json").string() + ": 1 entry dropped\n  adamw f32;numel=16384;tensors=4 on NVIDIA H100 80GB "
                                           "HBM3 (sm_90; NVRTC 13.0, driver 13000, 2025-01-01T00:00:00Z)\n");
  ktune::write_file_atomic(dir / "c.json", doc.dump());
  REQUIRE(run_ktune("--json cache prune " + (dir / "c.json").string(), &out) == 0);
  const auto pruned = nlohmann::json::parse(out);
  REQUIRE(pruned.at("dropped_keys").size() == 1);
  CHECK(pruned["dropped_keys"][0]["driver_version"] == "13000");
}

TEST_CASE("CLI: cache size reports KTUNE_CACHE_DIR's parts, cache clean empties them", "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-cache-dir");
  for (const char* f : {"cubin/a.cubin", "cubin/b.cubin", "emu/c.so", "sessions/d.log"}) {
    std::filesystem::create_directories((dir / f).parent_path());
    std::ofstream(dir / f) << std::string(1500, 'x');
  }
  const std::string env = "KTUNE_CACHE_DIR=" + dir.string() + " ";
  std::string out;
  REQUIRE(run_command(env + ktune_exe().string() + " cache size", &out) == 0);
  const auto binaries = lines_starting(out, "| compiled binaries ");
  REQUIRE(binaries.size() == 1);
  CHECK_THAT(binaries[0], Catch::Contains(" 2 | ") && Catch::Contains("3.0 KB"));
  CHECK_THAT(out, Catch::Contains("| session logs ") && Catch::Contains("6.0 KB"));
  check_aligned(lines_starting(out, "|"));
  REQUIRE(run_command(env + ktune_exe().string() + " cache clean", &out) == 0);
  CHECK_THAT(out, Catch::Contains("removed 3 files (4.5 KB)"));
  CHECK_FALSE(std::filesystem::exists(dir / "cubin"));
  CHECK_FALSE(std::filesystem::exists(dir / "emu"));
  CHECK(std::filesystem::exists(dir / "sessions/d.log"));  // kept without --logs
  REQUIRE(run_command(env + ktune_exe().string() + " cache clean --logs", &out) == 0);
  CHECK_FALSE(std::filesystem::exists(dir / "sessions/d.log"));
  // What a running ktune (this test's process) is writing stays: a compile's source and object, a temp file; a
  // killed writer's go (no process has an id past the kernel's pid_max).
  const std::string live = std::to_string(::getpid());
  const std::vector<std::string> kept = {"emu/tmp-0123abcd-" + live + "-0.cpp", "emu/tmp-0123abcd-" + live + "-0.so",
                                         "cubin/.a.cubin.tmp." + live + ".3"};
  const std::vector<std::string> removed = {"emu/tmp-0123abcd-99999999-0.so", "cubin/.a.cubin.tmp.99999999.0",
                                            "emu/c.so"};
  for (const auto& f : {kept, removed})
    for (const auto& name : f) {
      std::filesystem::create_directories((dir / name).parent_path());
      std::ofstream(dir / name) << "x";
    }
  REQUIRE(run_command(env + ktune_exe().string() + " cache clean", &out) == 0);
  CHECK_THAT(out, Catch::Contains("removed 3 files (3 B)") &&
                      Catch::Contains("; kept 3 that running ktune processes are writing"));
  for (const auto& name : kept) CHECK(std::filesystem::exists(dir / name));
  for (const auto& name : removed) CHECK_FALSE(std::filesystem::exists(dir / name));
  // A session's log and the lock it holds stay, with --logs too; a log whose writer is gone goes, and the lock
  // file a killed writer left.
  for (const auto& name : kept) std::filesystem::remove(dir / name);
  std::filesystem::create_directories(dir / "sessions");
  for (const char* f : {"sessions/live.log", "sessions/done.log", "sessions/killed.log.lock"})
    std::ofstream(dir / f) << "x";
  {
    const ktune::FileLock held(ktune::lock_path(dir / "sessions/live.log"));
    REQUIRE(run_command(env + ktune_exe().string() + " cache clean --logs", &out) == 0);
    CHECK_THAT(out, Catch::Contains("removed 2 files") && Catch::Contains("; kept 2 that running ktune processes"));
    CHECK(std::filesystem::exists(dir / "sessions/live.log"));
    CHECK(std::filesystem::exists(ktune::lock_path(dir / "sessions/live.log")));
    CHECK_FALSE(std::filesystem::exists(dir / "sessions/done.log"));
    CHECK_FALSE(std::filesystem::exists(dir / "sessions/killed.log.lock"));
  }
  REQUIRE(run_command(env + ktune_exe().string() + " cache clean --logs", &out) == 0);
  CHECK_FALSE(std::filesystem::exists(dir / "sessions/live.log"));
}

TEST_CASE("CLI: cache size and cache clean make no cache folder", "[cli]") {
  // Without KTUNE_CACHE_DIR, XDG_CACHE_HOME or HOME the cache goes in TMPDIR, made by what writes into it.
  const auto tmp = ktune::test::scratch_dir("cli-cache-unmade");
  const auto folder = tmp / ("ktune-cache-" + std::to_string(::geteuid()));
  const std::string env = "KTUNE_CACHE_DIR= XDG_CACHE_HOME= HOME= TMPDIR=" + tmp.string() + " ";
  std::string out;
  REQUIRE(run_command(env + ktune_exe().string() + " cache size", &out) == 0);
  const auto total = lines_starting(out, "| total ");
  REQUIRE(total.size() == 1);
  CHECK_THAT(total[0], Catch::Contains(folder.string()) && Catch::Contains(" 0 | "));
  CHECK_FALSE(std::filesystem::exists(folder));
  REQUIRE(run_command(env + ktune_exe().string() + " --json cache size", &out) == 0);
  CHECK(nlohmann::json::parse(out)["dir"] == folder.string());
  CHECK_FALSE(std::filesystem::exists(folder));
  REQUIRE(run_command(env + ktune_exe().string() + " cache clean --logs", &out) == 0);
  CHECK_THAT(out, Catch::Contains("removed 0 files (0 B) from " + folder.string()));
  CHECK_FALSE(std::filesystem::exists(folder));
}

TEST_CASE("CLI: replay with time budgets says a target was not reached within them, never '>0'", "[cli]") {
  // 16 recorded points of one second each; the optimum is one of them.
  nlohmann::json kt = {{"tune_params_keys", {"a"}}, {"tune_params", {{"a", nlohmann::json::array()}}},
                       {"cache", nlohmann::json::object()}};
  for (int a = 1; a <= 16; ++a) {
    kt["tune_params"]["a"].push_back(a);
    kt["cache"][std::to_string(a)] = {{"a", a}, {"time", 1.0 + a}, {"benchmark_time", 1000.0}};
  }
  const auto dir = ktune::test::scratch_dir("cli-replay");
  std::ofstream(dir / "kt.json") << kt.dump();
  std::string out;
  REQUIRE(run_ktune("replay --dataset " + (dir / "kt.json").string() +
                        " --strategy random --budget 2s,3s --runs 5 --target 1", &out) == 0);
  INFO(out);
  CHECK_THAT(out, !Catch::Contains(">0"));
  CHECK_THAT(out, Catch::Contains("not within 3s"));
  // Counts as tune takes them, and each strategy once: one line, exit 2.
  const std::string replay = "replay --dataset " + (dir / "kt.json").string() + " --runs 2";
  CHECK(run_ktune(replay + " --budget 5.5 2>&1", &out) == 2);
  CHECK_THAT(out, Catch::Contains("bad budget '5.5': evaluations must be a whole number"));
  CHECK(std::count(out.begin(), out.end(), '\n') == 1);
  CHECK(run_ktune(replay + " --strategy random,exhaustive,random 2>&1", &out) == 2);
  CHECK_THAT(out, Catch::Contains("--strategy names 'random' twice"));
  CHECK(std::count(out.begin(), out.end(), '\n') == 1);
  // And each budget once, however it is written.
  CHECK(run_ktune(replay + " --budget 2,4,2 2>&1", &out) == 2);
  CHECK_THAT(out, Catch::Contains("--budget names '2' twice ('2' is the same budget)"));
  CHECK(run_ktune(replay + " --budget 1m,60s 2>&1", &out) == 2);
  CHECK_THAT(out, Catch::Contains("--budget names '1m' twice ('60s' is the same budget)"));
  REQUIRE(run_ktune(replay + " --budget 4evals 2>&1", &out) == 0);
  // Each median with its 95 % interval from 6 runs on; --json has every run's evaluations too (null: never).
  const std::string study = "replay --dataset " + (dir / "kt.json").string() + " --budget 4,16 --target 1";
  REQUIRE(run_ktune(study + " --runs 8 2>&1", &out) == 0);
  CHECK_THAT(out, Catch::Matches("(.|\n)*evaluations to 100% of optimum: median [0-9]+ \\(95% CI [0-9]+ to "
                                 "[0-9]+\\), (.|\n)*"));
  REQUIRE(run_ktune(study + " --runs 8 --json", &out) == 0);
  const auto j = nlohmann::json::parse(out.substr(out.find('{'))).at("strategies").at(0);  // after the progress
  const auto runs = j.at("runs_to_target").at("evaluations");
  REQUIRE(runs.size() == 8);
  std::vector<double> evals;
  for (const auto& r : runs) evals.push_back(r.is_null() ? INFINITY : r.get<double>());
  std::sort(evals.begin(), evals.end());
  // 8 runs: ranks 1 and 8 (P(Bin(8, 1/2) = 0) = 0.4 %, P(<= 1) = 3.5 %).
  CHECK(j.at("evals_to_target").at("median_ci95") == nlohmann::json::array({evals.front(), evals.back()}));
  REQUIRE(run_ktune(study + " --runs 5 2>&1", &out) == 0);
  CHECK_THAT(out, !Catch::Contains("95% CI"));  // too few runs for one
}

TEST_CASE("CLI: replay prints its target as given and no share of a brute-force time the file does not record",
          "[cli]") {
  // 16 recorded points with times only: Kernel Tuner's fields of their costs are absent.
  nlohmann::json kt = {{"tune_params_keys", {"a"}}, {"tune_params", {{"a", nlohmann::json::array()}}},
                       {"cache", nlohmann::json::object()}};
  for (int a = 1; a <= 16; ++a) {
    kt["tune_params"]["a"].push_back(a);
    kt["cache"][std::to_string(a)] = {{"a", a}, {"time", 1.0 + a}};
  }
  const auto dir = ktune::test::scratch_dir("cli-replay-target");
  std::ofstream(dir / "kt.json") << kt.dump();
  const std::string replay = "replay --dataset " + (dir / "kt.json").string() + " --strategy exhaustive --runs 1";
  std::string out;
  REQUIRE(run_ktune(replay + " --budget 8,plateau:3 --target 0.9995 2>&1", &out) == 0);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("evaluations to 99.95% of optimum: median 1,"));
  CHECK_THAT(out, Catch::Contains("recorded time to 99.95% of optimum: n/a (") &&
                      Catch::Contains("records no compile, verification or benchmark time)"));
  CHECK_THAT(out, Catch::Contains("plateau:3 stopped the runs after 4 evaluations (p25 4, p75 4), n/a of the "
                                  "brute-force time"));
  CHECK_THAT(out, !Catch::Contains("nan") && !Catch::Contains("100% of optimum"));
  // A file it cannot read as a space: one line, exit 2.
  kt["tune_params_keys"] = {7};
  std::ofstream(dir / "keys.json") << kt.dump();
  CHECK(run_ktune("replay --dataset " + (dir / "keys.json").string() + " 2>&1", &out) == 2);
  CHECK_THAT(out, Catch::Contains("\"tune_params_keys\" lists 7, not a parameter's name"));
  CHECK(std::count(out.begin(), out.end(), '\n') == 1);
}

TEST_CASE("CLI: train counts its steps against --steps and says the time left after each but the first and last",
          "[cli]") {
  std::string out;
  REQUIRE(run_ktune("train --model tiny --ctx 8 --batch 2 --steps 12 --threads 1", &out) == 0);
  INFO(out);
  const auto steps = lines_starting(out, "step ");
  REQUIRE(steps.size() == 12);
  CHECK_THAT(steps[0], Catch::StartsWith("step  1/12  loss ") && Catch::EndsWith("TFLOP/s)"));
  for (std::size_t i = 1; i + 1 < steps.size(); ++i) {
    INFO(steps[i]);
    CHECK_THAT(steps[i], Catch::Matches(fmt::format("step {:>2}/12  loss .*TFLOP/s\\)  eta [0-9]+ s", i + 1)));
  }
  CHECK_THAT(steps.back(), Catch::StartsWith("step 12/12  loss ") && Catch::EndsWith("TFLOP/s)"));
  // The run's summary: the median step, between the fastest and the slowest printed.
  const auto summary = lines_starting(out, "loss ");
  REQUIRE(summary.size() == 1);
  CHECK_THAT(summary[0], Catch::Matches("loss [0-9.]+ -> [0-9.]+ over 12 steps; the median step [0-9.]+ ms, [0-9]+ "
                                        "tokens/s"));
  const auto ms_of = [](const std::string& line, const std::string& before) {
    const auto at = line.find(before) + before.size();
    return std::stod(line.substr(at));
  };
  std::vector<double> step_ms;
  for (const auto& line : steps) step_ms.push_back(ms_of(line, "("));
  const double median = ms_of(summary[0], "the median step ");
  CHECK(median >= *std::min_element(step_ms.begin(), step_ms.end()) - 0.05);
  CHECK(median <= *std::max_element(step_ms.begin(), step_ms.end()) + 0.05);
}

TEST_CASE("CLI: train --accumulate says a step's micro-batches and windows, and its JSON says them too, with each "
          "step's gradient norm",
          "[cli]") {
  std::string out;
  REQUIRE(run_ktune("train --model tiny --ctx 8 --batch 2 --accumulate 3 --steps 2 --threads 2", &out) == 0);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("ctx 8, batch 2 x 3 micro-batches a step (6 windows)"));
  const auto steps = lines_starting(out, "step ");
  REQUIRE(steps.size() == 2);
  CHECK_THAT(steps[0], Catch::Matches("step 1/2  loss [0-9.]+  norm [0-9.]+  \\([0-9.]+ ms, [0-9]+ tokens/s, "
                                      "[0-9.e+-]+ TFLOP/s\\)"));
  REQUIRE(run_ktune("train --model tiny --ctx 8 --batch 2 --accumulate 3 --steps 1 --threads 2 --json", &out) == 0);
  const auto j = nlohmann::json::parse(out);
  CHECK(j.at("batch_size") == 2);  // named as eval, bench e2e and bench memory name it
  CHECK(j.at("micro_batches") == 3);
  REQUIRE(j.at("steps").size() == 1);
  const auto& step = j.at("steps")[0];
  CHECK(step.at("grad_norm").get<double>() > 0);
  CHECK(step.at("tokens") == 3 * 2 * 8);  // a step's micro-batches of 2 windows of 8 tokens
  CHECK(step.at("tokens_per_s").get<double>() ==
        Approx(step.at("tokens").get<double>() / step.at("seconds").get<double>()));
}

TEST_CASE("CLI: --recompute [swiglu|blocks] trains to the same losses, says so, and bench memory and e2e plan less",
          "[cli]") {
  std::string out, recomputed;
  const std::string run = "train --model tiny --ctx 8 --batch 2 --steps 3 --threads 2";
  REQUIRE(run_ktune(run + " --recompute", &recomputed) == 0);
  CHECK_THAT(recomputed, Catch::Contains("ctx 8, batch 2, 2 threads, recompute blocks"));
  CHECK_THAT(recomputed, Catch::Contains("planned for a step (weights, gradients, AdamW state, activations"));
  REQUIRE(run_ktune(run + " --json", &out) == 0);
  const auto a = nlohmann::json::parse(out);
  CHECK(a.at("recompute") == "none");
  for (const std::string level : {"swiglu", "blocks"}) {
    INFO(level);
    REQUIRE(run_ktune(run + " --json --recompute " + level, &recomputed) == 0);
    const auto b = nlohmann::json::parse(recomputed);
    CHECK(b.at("recompute") == level);
    CHECK(b.at("plan_peak_bytes").get<std::int64_t>() < a.at("plan_peak_bytes").get<std::int64_t>());
    REQUIRE(b.at("steps").size() == 3);
    for (std::size_t s = 0; s < 3; ++s) CHECK(b.at("steps")[s].at("loss") == a.at("steps")[s].at("loss"));
  }
  CHECK(run_bad(run + " --recompute all", &out) == 2);
  CHECK_THAT(out, Catch::Contains("--recompute"));
  // auto: the tiny model fits anywhere, so nothing is recomputed, and the run says why.
  REQUIRE(run_ktune(run + " --recompute auto", &recomputed) == 0);
  CHECK_THAT(recomputed, Catch::Matches("recompute auto: none \\([0-9.]+ [KM]iB planned, within the [0-9.]+ [GM]iB "
                                        "available on the host\\)\n(.|\n)*"));
  REQUIRE(run_ktune(run + " --json --recompute auto", &recomputed) == 0);
  CHECK(nlohmann::json::parse(recomputed).at("recompute") == "none");
  CHECK(run_bad("bench memory --model tiny --recompute auto", &out) == 2);  // plans without a device to fit
  CHECK(run_bad("bench e2e --model tiny --sweep --recompute auto", &out) == 2);
  CHECK_THAT(out, Catch::Contains("--recompute auto fits one run's shape"));
  CHECK(run_command("KTUNE_NO_DEVICE=1 " + ktune_exe().string() + " " + run + " --backend cuda --recompute auto",
                    &out) == 2);
  CHECK_THAT(out, Catch::Contains("no CUDA device"));

  // xl at context 512: seed 003's case, which the report's A100 (40 GB) profiled up to ctx 256 only.
  REQUIRE(run_ktune("bench memory --model xl --ctx 512 --json", &out) == 0);
  const auto keep = nlohmann::json::parse(out).at(0);
  const std::int64_t layers = 48, slot = keep.at("activations_per_block");
  CHECK(keep.at("peak_step").get<std::int64_t>() > std::int64_t{40} << 30);
  for (const std::string level : {"swiglu", "blocks"}) {
    INFO(level);
    REQUIRE(run_ktune("bench memory --model xl --ctx 512 --json --recompute " + level, &recomputed) == 0);
    const auto plan = nlohmann::json::parse(recomputed).at(0);
    CHECK(plan.at("recompute") == level);
    const std::int64_t kept = plan.at("activations_kept_per_block");
    CHECK(kept < slot);
    CHECK(keep.at("activations_backward").get<std::int64_t>() - plan.at("activations_backward").get<std::int64_t>() ==
          (layers - 1) * (slot - kept));
    CHECK((plan.at("peak_step").get<std::int64_t>() < std::int64_t{40} << 30) == (level == "blocks"));
  }
  REQUIRE(run_ktune("bench memory --model xl --ctx 512 --recompute", &out) == 0);
  CHECK_THAT(out, Catch::Contains(", recompute blocks") && Catch::Contains("each block keeps (the rest recomputed)"));

  REQUIRE(run_ktune("bench e2e --model tiny --ctx 8 --batch 2 --warmup 0 --trials 1 --threads 2 --recompute",
                    &out) == 0);
  CHECK_THAT(out, Catch::Contains("activations recomputed: each block's forward runs again before its backward"));
  CHECK_THAT(out, Catch::Contains("tiny ctx 8: step 1 of 1 (0 warm-up)"));  // progress, on stderr
  REQUIRE(run_ktune("bench e2e --model tiny --ctx 8 --batch 2 --warmup 0 --trials 1 --threads 2 --recompute=swiglu",
                    &out) == 0);
  CHECK_THAT(out, Catch::Contains("activations recomputed: each block's SwiGLU runs again before its backward"));
}

TEST_CASE("CLI: bench memory --fit says the least --recompute at which a step fits in that memory, per context",
          "[cli]") {
  std::string out;
  const std::string plan = "bench memory --model xl --ctx 512 --threads 2 --json";
  std::map<std::string, std::int64_t> peak;
  for (const std::string level : {"none", "swiglu", "blocks"}) {
    REQUIRE(run_ktune(plan + " --recompute " + level, &out) == 0);
    peak[level] = nlohmann::json::parse(out).at(0).at("peak_step");
  }
  REQUIRE(peak["none"] > peak["swiglu"]);
  REQUIRE(peak["swiglu"] > peak["blocks"]);
  const auto fit_at = [&](std::int64_t bytes) {
    REQUIRE(run_ktune(plan + " --fit " + std::to_string(bytes) + "B", &out) == 0);
    const auto j = nlohmann::json::parse(out).at(0);
    CHECK(j.at("fit_bytes") == bytes);
    CHECK(j.at("recompute") == "none");  // the plan itself is as asked
    return j.at("fit_recompute");
  };
  CHECK(fit_at(peak["none"]) == "none");
  CHECK(fit_at(peak["none"] - 1) == "swiglu");
  CHECK(fit_at(peak["swiglu"]) == "swiglu");
  CHECK(fit_at(peak["swiglu"] - 1) == "blocks");
  CHECK(fit_at(peak["blocks"]) == "blocks");
  CHECK(fit_at(peak["blocks"] - 1).is_null());
  // Units, and the row of the table.
  REQUIRE(run_ktune("bench memory --model xl --ctx 128,512 --threads 2 --fit 40GiB", &out) == 0);
  CHECK_THAT(out, Catch::Contains("| **least --recompute for a step in 40.00 GiB** |"));
  REQUIRE(run_ktune("bench memory --model xl --ctx 512 --threads 2 --fit 1e3GB --json", &out) == 0);
  CHECK(nlohmann::json::parse(out).at(0).at("fit_bytes") == 1000000000000);
  // A bare number is refused: 40 bytes, or the 40 GB meant?
  for (const char* bad : {"40GiBs", "lots", "nanGB", "40 GiB", "40", " 40GiB", "0x10GB", "+40GiB"}) {
    INFO(bad);
    CHECK(run_bad(std::string("bench memory --fit '") + bad + "'", &out) == 2);
    CHECK_THAT(out, Catch::Contains("--fit: must be a size with its unit, such as 40GiB"));
  }
  // A size with its unit that no memory has is told so, not that it lacks a unit.
  for (const char* bad : {"-5GB", "0B", "0.5B", "9999999999999GiB"}) {
    INFO(bad);
    CHECK(run_bad(std::string("bench memory --fit '") + bad + "'", &out) == 2);
    CHECK(out == fmt::format("ktune: --fit: must be a size of at least 1B and under 8EiB, got '{}' (see --help)\n",
                             bad));
  }
}

TEST_CASE("CLI: bench memory --backend plans the run as it allocates there, a device's attention dS included",
          "[cli]") {
  std::string out;
  const std::string plan = "bench memory --model tiny --ctx 32 --batch 4 --threads 2 --json";
  const auto at = [&](const std::string& args) {
    REQUIRE(run_ktune(plan + " " + args, &out) == 0);
    return nlohmann::json::parse(out).at(0);
  };
  const auto cpu = at(""), emu = at("--backend emu"), cuda = at("--backend cuda");
  CHECK(cpu.at("backend") == "cpu");
  CHECK(cpu.at("threads") == 2);
  CHECK(cpu.at("scratch") == 0);
  // A device's plan: none of the cpu backend's scratch (a block of 32 query rows over 32 keys per thread, and the
  // RMSNorm weight gradients' 64 partials of d_model 64, fp32), and materialised attention's backward dS,
  // (4, 4, 32, 32) fp32, in its ops' scratch.
  CHECK(emu.at("backend") == "emu");
  CHECK(emu.at("threads") == 0);
  CHECK(emu.at("scratch") == 4 * 4 * 32 * 32 * 4);
  CHECK(emu.at("peak_step").get<std::int64_t>() ==
        cpu.at("peak_step").get<std::int64_t>() - 2 * 32 * 32 * 4 - 64 * 64 * 4 + 4 * 4 * 32 * 32 * 4);
  CHECK(cuda.at("peak_step") == emu.at("peak_step"));
  // Flash attention (compiled tf32 and bf16, on a device by default) keeps no dS: its backward's workspace at the
  // default config, D (4, 4, 32) and the dQ accumulator (4, 32, 64), fp32. Eager mode materialises dS, and its
  // chains' temporaries (the cross-entropy's (128, vocab 10000) fp32) need more.
  CHECK(at("--dtype tf32").at("backend") == "cuda");
  CHECK(at("--dtype tf32").at("scratch") == 4 * 4 * 32 * 4 + 4 * 32 * 64 * 4);
  CHECK(at("--dtype bf16 --mode eager").at("scratch").get<std::int64_t>() > 4 * 4 * 32 * 32 * 2);
  CHECK(run_bad("bench memory --model tiny --dtype bf16 --backend cpu", &out) == 2);
  CHECK(out == "ktune: the cpu backend runs f32 only, not bf16; --dtype tf32 and bf16 need --backend cuda or emu\n");
}

TEST_CASE("CLI: bench memory --buffers lists every buffer of a step in its dtype, the largest named", "[cli]") {
  std::string out;
  REQUIRE(run_ktune("bench memory --model small --ctx 128,256 --dtype bf16 --threads 2 --buffers --json", &out) == 0);
  const auto plans = nlohmann::json::parse(out);
  REQUIRE(plans.size() == 2);
  for (const auto& plan : plans) {
    std::int64_t total = 0;
    std::map<std::string, std::string> dtype;
    for (const auto& b : plan.at("buffers")) {
      total += b.at("bytes").get<std::int64_t>();
      dtype[b.at("name")] = b.at("dtype");
    }
    CHECK(total == plan.at("peak_step").get<std::int64_t>());
    // Seed 003's question under mixed precision: the weights fp32 (and their bf16 copy), activations and
    // logits bf16, the norms' statistics and the loss fp32, the gradients fp32.
    CHECK(dtype["lm_head.weight"] == "f32");
    CHECK(dtype["param_bf16"] == "bf16");
    CHECK(dtype["h"] == "bf16");
    CHECK(dtype["logits"] == "bf16");
    CHECK(dtype["rstd1"] == "f32");
    CHECK(dtype["losses"] == "f32");
    CHECK(dtype["grad"] == "f32");
  }
  REQUIRE(run_ktune("bench memory --model small --ctx 256 --dtype bf16 --threads 2 --buffers", &out) == 0);
  CHECK_THAT(out, Catch::Contains("### Buffers of a full step at ctx 256 (2.55 GiB in all, the full step's peak)"));
  CHECK_THAT(out, Catch::Contains("the largest activation: logits (1024, 10000) bf16, 19.5 MiB"));
  CHECK_THAT(out, Catch::Contains("| activations, per block | h | SwiGLU output silu(a) b, W2's input | (1024, 3072) | "
                                  "bf16 | 6.0 MiB | 12 | 72.0 MiB |"));
  // Without --buffers, no listing.
  REQUIRE(run_ktune("bench memory --model small --ctx 256 --json", &out) == 0);
  CHECK_FALSE(nlohmann::json::parse(out).at(0).contains("buffers"));
}

TEST_CASE("CLI: bench memory --accumulate plans the buffer where a step's micro-batches add their gradients",
          "[cli]") {
  std::string one, four;
  REQUIRE(run_ktune("bench memory --model small --ctx 256 --json", &one) == 0);
  REQUIRE(run_ktune("bench memory --model small --ctx 256 --json --accumulate 4", &four) == 0);
  const auto a = nlohmann::json::parse(one).at(0), b = nlohmann::json::parse(four).at(0);
  CHECK(a.at("micro_batches") == 1);
  CHECK(b.at("micro_batches") == 4);
  CHECK(b.at("workspace_backward").get<std::int64_t>() - a.at("workspace_backward").get<std::int64_t>() ==
        10000 * 768 * 4);  // (vocab, d_model) fp32
  CHECK(b.at("activations_backward") == a.at("activations_backward"));
  REQUIRE(run_ktune("bench memory --model small --ctx 256 --accumulate 4", &four) == 0);
  CHECK_THAT(four, Catch::Contains("materialised attention, 4 micro-batches a step"));
}

TEST_CASE("CLI: train --resume at another batch shape notes that its batches differ from the run's", "[cli]") {
  const auto ckpt = ktune::test::scratch_dir("train_resume_shape") / "run.ckpt";
  std::filesystem::remove(ckpt);
  const std::string run = "train --model tiny --threads 2 --checkpoint " + ckpt.string() + " --resume";
  std::string out;
  REQUIRE(run_ktune(run + " --steps 1 --batch 2 --accumulate 2", &out) == 0);
  REQUIRE(run_ktune(run + " --steps 2 --batch 2 --accumulate 2", &out) == 0);
  CHECK_THAT(out, !Catch::Contains("note:"));
  REQUIRE(run_ktune(run + " --steps 3 --batch 2", &out) == 0);  // 2 windows a step, not 4
  CHECK_THAT(out, Catch::Contains("note: " + ckpt.string() + " was trained at ctx 32, batch 2 x 2 micro-batches; "
                                  "this run goes on at ctx 32, batch 2, so its batches are not those the run would "
                                  "have drawn"));
}

TEST_CASE("CLI: train --resume with other optimizer or schedule settings notes which, against the checkpoint's",
          "[cli]") {
  const auto ckpt = ktune::test::scratch_dir("train_resume_settings") / "run.ckpt";
  std::filesystem::remove(ckpt);
  const std::string run = "train --model tiny --threads 2 --lr-schedule cosine --cosine-steps 20 --checkpoint " +
                          ckpt.string() + " --resume";
  std::string out;
  REQUIRE(run_ktune(run + " --steps 1", &out) == 0);
  REQUIRE(run_ktune(run + " --steps 2", &out) == 0);
  CHECK_THAT(out, !Catch::Contains("note:"));
  REQUIRE(run_ktune(run + " --steps 3 --lr 0.01 --clip-norm 0", &out) == 0);
  CHECK_THAT(out, Catch::Contains("note: this run goes on with --clip-norm 0 (was 1), --lr 0.01 (was 0.003): its "
                                  "steps are not those the run would have taken"));
}

TEST_CASE("CLI: train --resume goes on with the model and context of its checkpoint where the line names none",
          "[cli]") {
  // A run started from --weights takes their model and context; the same line, run again, resumes its
  // checkpoint, which holds them too.
  const auto dir = ktune::test::scratch_dir("train_resume_model");
  const auto ckpt = dir / "run.ckpt", weights = dir / "w.safetensors";
  std::filesystem::remove(ckpt);
  std::string out;
  REQUIRE(run_ktune("train --model tiny --layers 1 --ctx 16 --batch 2 --threads 2 --steps 1 --save " +
                        weights.string(),
                    &out) == 0);
  const std::string run = "train --weights " + weights.string() + " --batch 2 --threads 2 --checkpoint " +
                          ckpt.string() + " --resume";
  REQUIRE(run_ktune(run + " --steps 1", &out) == 0);
  CHECK_THAT(out, Catch::Contains("--ctx 16 from the metadata of " + weights.string()));
  REQUIRE(run_ktune(run + " --steps 2 --save " + (dir / "resumed.safetensors").string(), &out) == 0);
  CHECK_THAT(out, Catch::Contains("--ctx 16 from the metadata of " + ckpt.string()) &&
                      Catch::Contains("resuming from " + ckpt.string() + " after step 1") &&
                      !Catch::Contains("was trained at"));
  REQUIRE(run_ktune("train --weights " + weights.string() + " --batch 2 --threads 2 --steps 2 --save " +
                        (dir / "straight.safetensors").string(),
                    &out) == 0);
  CHECK(ktune::read_file(dir / "resumed.safetensors") == ktune::read_file(dir / "straight.safetensors"));
  // A model the line names is the run's: a checkpoint of another is refused, not taken.
  CHECK(run_ktune(run + " --steps 3 --model tiny", &out) == 2);
  CHECK_THAT(out, Catch::Contains(ckpt.string() + " is a checkpoint of model custom"));
}

TEST_CASE("CLI: train --resume that validates on other batches says its losses and the best so far do not compare",
          "[cli]") {
  const auto dir = ktune::test::scratch_dir("train_resume_validation");
  const auto ckpt = dir / "run.ckpt";
  const std::string run = "train --model tiny --batch 2 --ctx 16 --threads 2 --eval-every 1 --save-best " +
                          (dir / "best.safetensors").string() + " --checkpoint " + ckpt.string() + " --resume";
  std::string out;
  REQUIRE(run_ktune(run + " --steps 1", &out) == 0);
  REQUIRE(run_ktune(run + " --steps 2 --eval-batches 2", &out) == 0);
  CHECK_THAT(out, Catch::Contains("note: this run validates on 2 batches of 2 x 16 windows of the training stream "
                                  "(was 4 batches of 2 x 16 windows of the training stream): its validation losses "
                                  "do not compare with those before step 2, nor with the best so far, ") &&
                      Catch::Contains(", which --save-best beats to write\n") &&
                      !Catch::Contains("its steps are not those"));  // the training steps are the run's
  REQUIRE(run_ktune(run + " --steps 3 --eval-batches 2", &out) == 0);
  CHECK_THAT(out, !Catch::Contains("note:"));
}

TEST_CASE("CLI: eval of weights trained on the synthetic stream reads the stream they learned, at their seed",
          "[cli]") {
  // The synthetic stream is drawn from the seed: at another one, the loss would be a stranger's stream's.
  const auto dir = ktune::test::scratch_dir("eval_synthetic_seed");
  const auto weights = (dir / "w.safetensors").string(), ckpt = (dir / "run.ckpt").string();
  std::string out;
  REQUIRE(run_ktune("train --model tiny --seed 5 --steps 40 --threads 2 --save " + weights + " --checkpoint " + ckpt,
                    &out) == 0);
  const auto loss = [&](const std::string& args) {
    REQUIRE(run_ktune("eval --threads 2 --json " + args, &out) == 0);
    return nlohmann::json::parse(out.substr(out.find('{'))).at("loss").get<double>();  // after the notes
  };
  const double own = loss("--weights " + weights + " --seed 5");
  CHECK(loss("--weights " + weights) == own);
  CHECK(loss("--weights " + ckpt) == own);  // a checkpoint of the same step says the same
  CHECK(loss("--weights " + weights + " --seed 0") > own + 1);  // another stream: the seed given is the run's
  REQUIRE(run_ktune("eval --threads 2 --weights " + weights + " 2>&1", &out) == 0);
  CHECK_THAT(out, Catch::Contains("note: --seed 5 from the metadata of " + weights +
                                  " (the synthetic stream it was trained on)\n") &&
                      Catch::Contains("tokens of the synthetic stream of seed 5 (no --tokens)"));
  // Weights trained on a token file say nothing of the synthetic stream.
  const auto tokens = dir / "t.u16";
  std::vector<std::uint16_t> ids(400);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::uint16_t>(i * 7 % 50);
  ktune::test::write_tokens(tokens, ids);
  REQUIRE(run_ktune("train --model tiny --seed 5 --steps 2 --threads 2 --tokens " + tokens.string() + " --save " +
                        weights,
                    &out) == 0);
  REQUIRE(run_ktune("eval --threads 2 --weights " + weights + " 2>&1", &out) == 0);
  CHECK_THAT(out, !Catch::Contains("note: --seed") && Catch::Contains("synthetic stream of seed 0"));
}

TEST_CASE("CLI: train --resume on the cpu backend at another --threads takes the steps the run would have taken",
          "[cli]") {
  // The cpu backend's sums run in an order of their own, not the threads': a resume at another count goes on
  // with the same bits, and says nothing.
  const auto dir = ktune::test::scratch_dir("train_resume_threads");
  const auto ckpt = dir / "run.ckpt";
  const std::string run = "train --model tiny --batch 8 --ctx 64 --checkpoint " + ckpt.string() + " --resume";
  std::string out;
  REQUIRE(run_ktune(run + " --threads 2 --steps 2", &out) == 0);
  REQUIRE(run_ktune(run + " --threads 1 --steps 4 --save " + (dir / "resumed.safetensors").string(), &out) == 0);
  CHECK_THAT(out, !Catch::Contains("note:"));
  REQUIRE(run_ktune("train --model tiny --batch 8 --ctx 64 --threads 3 --steps 4 --save " +
                        (dir / "straight.safetensors").string(),
                    &out) == 0);
  CHECK(ktune::read_file(dir / "resumed.safetensors") == ktune::read_file(dir / "straight.safetensors"));
}

TEST_CASE("CLI: train --json keeps its notes on stderr, says what ran, and keeps the steps of a run that diverged",
          "[cli]") {
  const auto dir = ktune::test::scratch_dir("train_json");
  const auto ckpt = dir / "run.ckpt";
  const auto err = dir / "stderr.txt";
  std::filesystem::remove(ckpt);
  const std::string run = "train --model tiny --threads 2 --checkpoint " + ckpt.string() + " --resume";
  std::string out;
  REQUIRE(run_ktune(run + " --steps 1", &out) == 0);
  const auto ktune_json = [&](const std::string& args, std::string* stdout_text) {  // stderr to err
    return ktune::test::run_command("{ " + ktune::test::ktune_exe().string() + " --json " + args + " 2>" +
                                        err.string() + "; }",
                                    stdout_text);
  };
  REQUIRE(ktune_json(run + " --steps 2 --lr 0.01", &out) == 0);
  const std::string notes = ktune::read_file(err);
  CHECK_THAT(notes, Catch::StartsWith("note: this run goes on with --lr 0.01 (was 0.003)"));
  auto j = nlohmann::json::parse(out);  // stdout: the JSON alone
  CHECK(j.at("backend") == "cpu");
  CHECK(j.at("dtype") == "f32");
  CHECK(j.at("resumed_after_step") == 1);
  REQUIRE(j.at("steps").size() == 1);
  CHECK(j.at("steps")[0].at("step") == 2);
  CHECK_FALSE(j.contains("error"));
  // A run that diverges fails, and its JSON holds the steps it took before.
  CHECK(ktune_json("train --model tiny --threads 2 --steps 5 --lr 1e38 --clip-norm 0", &out) == 1);
  j = nlohmann::json::parse(out);
  CHECK_THAT(j.at("error").get<std::string>(), Catch::Contains("training diverged"));
  CHECK(j.at("resumed_after_step").is_null());
  REQUIRE_FALSE(j.at("steps").empty());
  CHECK(j.at("steps")[0].at("step") == 1);
  CHECK_THAT(ktune::read_file(err), Catch::StartsWith("ktune: ") && Catch::Contains("training diverged"));
}

TEST_CASE("CLI: eval, generate and train take the model and context a weights file was trained at, where not given",
          "[cli]") {
  const auto w = ktune::test::scratch_dir("weights_metadata") / "w.safetensors";
  std::string out;
  REQUIRE(run_ktune("train --model tiny --d-model 32 --heads 2 --ctx 16 --steps 1 --threads 2 --save " + w.string(),
                    &out) == 0);
  // Without --d-model 32 --heads 2 the weights' shape was refused as another model's.
  REQUIRE(run_ktune("eval --threads 2 --weights " + w.string(), &out) == 0);
  CHECK_THAT(out, Catch::Contains("note: --d-model 32 --d-ff 192 --layers 2 --heads 2 --vocab 128 --ctx 16 from the "
                                  "metadata of " + w.string()));
  CHECK_THAT(out, Catch::Contains("4 x 16 tokens"));
  REQUIRE(run_ktune("generate --threads 2 --weights " + w.string() + " --prompt 1 2 --max-tokens 2", &out) == 0);
  CHECK_THAT(out, Catch::Contains("--ctx 16 from the metadata"));
  // A run trained on from them too (a resumed one takes its checkpoint's).
  REQUIRE(run_ktune("train --threads 2 --steps 1 --weights " + w.string(), &out) == 0);
  CHECK_THAT(out, Catch::Contains("--ctx 16 from the metadata") && Catch::Contains(", ctx 16, batch 4"));
  // What the command line gives stands.
  REQUIRE(run_ktune("eval --threads 2 --d-model 32 --heads 2 --ctx 8 --weights " + w.string(), &out) == 0);
  CHECK_THAT(out, !Catch::Contains("note:") && Catch::Contains("4 x 8 tokens"));
}

TEST_CASE("CLI: weights whose metadata states no head count say the count they run at", "[cli]") {
  const auto w = ktune::test::scratch_dir("weights_heads") / "w.safetensors";
  std::string out;
  REQUIRE(run_ktune("train --model tiny --d-model 32 --heads 2 --ctx 8 --steps 1 --threads 2 --save " + w.string(),
                    &out) == 0);
  ktune::TensorFile file = ktune::read_safetensors(w);
  file.metadata.clear();  // as PyTorch's save_file(model.state_dict()) writes them
  ktune::write_safetensors(w, file);
  for (const std::string& command : {std::string("eval"), std::string("generate --prompt 1 --max-tokens 1")}) {
    INFO(command);
    REQUIRE(run_ktune(command + " --threads 2 --ctx 8 --d-model 32 --weights " + w.string(), &out) == 0);
    CHECK_THAT(out, Catch::Contains("note: " + w.string() + " states no head count (no num_heads in its metadata): "
                                    "running at --heads 4, the model's; give --heads as the weights were trained"));
    REQUIRE(run_ktune(command + " --threads 2 --ctx 8 --d-model 32 --heads 2 --weights " + w.string(), &out) == 0);
    CHECK_THAT(out, !Catch::Contains("note:"));
  }
  // A file naming one of ktune's models has that model's head count.
  file.metadata["model"] = "tiny";
  ktune::write_safetensors(w, file);
  REQUIRE(run_ktune("eval --threads 2 --ctx 8 --weights " + w.string() + " --d-model 32 --heads 2", &out) == 0);
  CHECK_THAT(out, !Catch::Contains("note:"));
  REQUIRE(run_ktune("eval --threads 2 --ctx 8 --model tiny --weights " + w.string() + " --d-model 32", &out) == 0);
  CHECK_THAT(out, !Catch::Contains("states no head count"));
}

TEST_CASE("CLI: weights whose metadata gives no whole context are refused unless --ctx is given", "[cli]") {
  const auto dir = ktune::test::scratch_dir("weights_context");
  const auto w = dir / "w.safetensors";
  std::string out;
  REQUIRE(run_ktune("train --model tiny --ctx 16 --steps 1 --threads 2 --save " + w.string(), &out) == 0);
  ktune::TensorFile file = ktune::read_safetensors(w);
  for (const std::string& context : {std::string("abc"), std::string("0"), std::string("16.5")}) {
    INFO(context);
    file.metadata["context"] = context;
    ktune::write_safetensors(w, file);
    for (const std::string& command : {std::string("eval"), std::string("generate --prompt 1 --max-tokens 1")}) {
      INFO(command);
      CHECK(run_bad(command + " --threads 2 --weights " + w.string(), &out) == 2);
      CHECK(out == "ktune: the metadata of " + w.string() + " gives context as '" + context +
                       "', not a positive whole number; give the context to run at (--ctx)\n");
      CHECK(run_ktune(command + " --threads 2 --ctx 8 --weights " + w.string(), &out) == 0);
    }
  }
}

TEST_CASE("CLI: weights stating every size are a model of those sizes, named or not, and some sizes are refused",
          "[cli]") {
  const auto dir = ktune::test::scratch_dir("weights_sizes");
  const auto saved = dir / "saved.safetensors", w = dir / "w.safetensors";
  std::string out;
  REQUIRE(run_ktune("train --model tiny --d-model 32 --heads 2 --ctx 16 --steps 1 --threads 2 --save " +
                        saved.string(),
                    &out) == 0);
  const auto with_metadata = [&](const std::function<void(std::map<std::string, std::string>&)>& edit) {
    ktune::TensorFile file = ktune::read_safetensors(saved);
    edit(file.metadata);
    ktune::write_safetensors(w, file);
  };
  // Sizes without a model name: a custom model of them.
  with_metadata([](auto& m) { m.erase("model"); });
  REQUIRE(run_ktune("eval --threads 2 --weights " + w.string(), &out) == 0);
  CHECK_THAT(out, Catch::Contains("note: --d-model 32 --d-ff 192 --layers 2 --heads 2 --vocab 128 --ctx 16 from the "
                                  "metadata of " + w.string()));
  REQUIRE(run_ktune("generate --threads 2 --weights " + w.string() + " --prompt 1 2 --max-tokens 2", &out) == 0);
  // Some of them: refused, naming the others, unless the command line gives the sizes.
  with_metadata([](auto& m) {
    m.erase("model");
    m.erase("d_ff");
    m.erase("num_layers");
  });
  for (const std::string& command : {std::string("eval"), std::string("train --steps 1"),
                                     std::string("generate --prompt 1 2 --max-tokens 2")}) {
    INFO(command);
    CHECK(run_ktune(command + " --threads 2 --weights " + w.string(), &out) == 2);
    CHECK_THAT(out, Catch::StartsWith("ktune: the metadata of " + w.string() + " states 3 sizes but not d_ff, "
                                      "num_layers of its model: give the sizes the weights were trained at (--d-ff, "
                                      "--layers, or --model)"));
    CHECK(std::count(out.begin(), out.end(), '\n') == 1);
  }
  REQUIRE(run_ktune("eval --threads 2 --d-model 32 --heads 2 --weights " + w.string(), &out) == 0);
  // A model of ktune's by name: its sizes, those the file states over them.
  with_metadata([](auto& m) {
    m["model"] = "tiny";
    m.erase("d_ff");
    m.erase("num_layers");
  });
  REQUIRE(run_ktune("eval --threads 2 --weights " + w.string(), &out) == 0);
  CHECK_THAT(out, Catch::Contains("note: --d-model 32 --d-ff 192 --layers 2 --heads 2 --vocab 128 --ctx 16"));
}

TEST_CASE("CLI: weights of another rope_theta are refused as such, with no note of a model taken from them", "[cli]") {
  const auto dir = ktune::test::scratch_dir("weights_theta");
  const auto w = dir / "w.safetensors";
  std::string out;
  REQUIRE(run_ktune("train --model tiny --steps 1 --threads 2 --save " + w.string(), &out) == 0);
  ktune::TensorFile file = ktune::read_safetensors(w);
  file.metadata["rope_theta"] = "500000";
  ktune::write_safetensors(w, file);
  for (const std::string& command :
       {std::string("eval"), std::string("eval --model tiny"), std::string("train --steps 1"),
        std::string("generate --prompt 1 --max-tokens 1")}) {
    INFO(command);
    CHECK(run_ktune(command + " --threads 2 --weights " + w.string(), &out) == 2);
    CHECK(out == "ktune: " + w.string() + " holds weights of a model with rope_theta 500000 (its metadata); ktune "
                 "runs RoPE at theta 10000 in every model and no option sets another, so these weights cannot be "
                 "run\n");
  }
}

TEST_CASE("CLI: train says which tokens it trains and validates on, and what --val-split holds out", "[cli]") {
  const auto file = ktune::test::scratch_dir("train_tokens") / "t.u16";
  std::vector<std::uint16_t> tokens(6400);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint16_t>(i * 7 % 128);
  ktune::test::write_tokens(file, tokens);
  std::string out;
  REQUIRE(run_ktune("train --model tiny --steps 1 --threads 2 --tokens " + file.string() +
                        " --val-split 0.1 --eval-every 1",
                    &out) == 0);
  CHECK_THAT(out, Catch::Contains("tokens: " + file.string() +
                                  ", the first 5760 of 6400 (the last 640 held out for validation)"));
  CHECK_THAT(out, Catch::Contains("val loss"));
  REQUIRE(run_ktune("train --model tiny --steps 1 --threads 2 --tokens " + file.string() + " --eval-every 1", &out) ==
          0);
  CHECK_THAT(out, Catch::Contains("tokens: " + file.string() + " (6400), validated on the same tokens"));
}

TEST_CASE("CLI: eval says the loss and its perplexity, of batches or of a whole token file", "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-eval");
  std::vector<std::uint16_t> ids(400);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::uint16_t>(i * 37 % 128);
  ktune::test::write_tokens(dir / "t.u16", ids);
  std::string out;
  for (const std::string& args : {std::string("eval --model tiny --ctx 8 --batch 2 --threads 2"),
                                 "eval --model tiny --ctx 8 --batch 2 --threads 2 --tokens " + (dir / "t.u16").string(),
                                 "eval --model tiny --ctx 8 --batch 2 --threads 2 --all --tokens " +
                                     (dir / "t.u16").string()}) {
    INFO(args);
    REQUIRE(run_ktune(args + " --json", &out) == 0);
    const auto j = nlohmann::json::parse(out);
    CHECK(j.at("perplexity").get<double>() == Approx(std::exp(j.at("loss").get<double>())));
    CHECK(j.at("perplexity").get<double>() > 1);
    // The same run's description either way: named as train, bench e2e and bench memory name it.
    CHECK(j.at("context_length") == 8);
    CHECK(j.at("batch_size") == 2);
    CHECK(j.at("backend") == "cpu");
    // Which tokens the loss is of: the synthetic stream where no --tokens is given.
    const bool on_file = args.find("--tokens") != std::string::npos;
    CHECK(j.at("tokens_file") == (on_file ? nlohmann::json((dir / "t.u16").string()) : nlohmann::json()));
    CHECK(j.at("val_split").is_null());  // not given
    if (args.find("--all") != std::string::npos)
      CHECK(j.at("unscored_tokens") == 399 - 49 * 8);  // 49 windows of 8; the 7 predictable tokens after them
    REQUIRE(run_ktune(args, &out) == 0);
    if (args.find("--all") != std::string::npos)
      CHECK_THAT(out, Catch::Contains("49 windows of 8 tokens (the last 7 tokens, short of a window, not scored)"));
    else
      CHECK_THAT(out, Catch::Contains("2 x 8 tokens of " + (on_file ? (dir / "t.u16").string()
                                                                    : "the synthetic stream of seed 0 (no --tokens)")));
    CHECK_THAT(out, Catch::Matches(fmt::format("loss [0-9.]+ \\(perplexity {:.4g}[;)](.|\n)*",
                                               j.at("perplexity").get<double>())));
  }
}

TEST_CASE("CLI: eval of weights whose logits overflow says the loss is not finite and fails", "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-eval-overflow");
  const auto w = dir / "w.safetensors", dump = dir / "dump.json";
  std::filesystem::remove(dump);
  std::string out;
  REQUIRE(run_ktune("train --model tiny --steps 1 --threads 2 --save " + w.string(), &out) == 0);
  ktune::TensorFile file = ktune::read_safetensors(w);
  ktune::SafeTensor& head = file.tensors.at("lm_head.weight");
  REQUIRE(head.dtype == "F32");
  std::vector<float> big(head.bytes.size() / sizeof(float), 3e38f);  // finite, but no logit of them is
  head.bytes.assign(reinterpret_cast<const char*>(big.data()), head.bytes.size());
  ktune::write_safetensors(w, file);
  for (const std::string& args : {std::string(""), std::string(" --batches 2"), " --dump " + dump.string()}) {
    INFO(args);
    CHECK(run_ktune("eval --threads 2 --weights " + w.string() + args, &out) == 1);
    const auto said = lines_starting(out, "ktune: ");
    REQUIRE(said.size() == 1);
    CHECK_THAT(said[0], Catch::StartsWith("ktune: the loss is ") &&
                            Catch::Contains("the weights in " + w.string() + " give no finite loss"));
    CHECK_THAT(out, !Catch::Contains("nan") && !Catch::Contains("perplexity"));
    CHECK_FALSE(std::filesystem::exists(dump));
  }
}

TEST_CASE("CLI: generate prints the drawn token ids on one line, or them and the prompt as JSON", "[cli]") {
  std::string out;
  REQUIRE(run_ktune("generate --model tiny --ctx 8 --prompt 3 4 5 --max-tokens 6 --threads 2", &out) == 0);
  INFO(out);
  CHECK_THAT(out, Catch::Matches("([0-9]+ ){5}[0-9]+\n6 tokens in [0-9.]+ s: [0-9.]+ s to the first \\(the model's "
                                 "start and a forward\\), then [0-9.]+ tokens/s\n"));
  REQUIRE(run_ktune("generate --model tiny --ctx 8 --prompt 3,4,5 --max-tokens 6 --threads 2 --json", &out) == 0);
  const auto j = nlohmann::json::parse(out);
  CHECK(j.at("prompt") == nlohmann::json::array({3, 4, 5}));
  CHECK(j.at("tokens").size() == 6);
  // The run described as eval's JSON describes it.
  CHECK(j.at("backend") == "cpu");
  CHECK(j.at("dtype") == "f32");
  CHECK(j.at("max_tokens") == 6);
  CHECK(j.at("eos").is_null());
  CHECK(j.at("first_token_seconds").get<double>() > 0);
  CHECK(j.at("seconds").get<double>() >= j.at("first_token_seconds").get<double>());
  CHECK(run_bad("generate --model tiny --prompt 1,500", &out) == 2);
  CHECK_THAT(out, Catch::Contains("prompt token 500 is outside the vocabulary [0, 128)"));
  // Ids in one argument, separated by spaces and newlines as a tokenizer's output or a file of ids: "$(cat ids)".
  for (const std::string& prompt : {std::string("\"3 4\n5\n\""), std::string("\" 3, 4 ,5 \""),
                                    std::string("3 \"4\t5\"")}) {
    INFO(prompt);
    REQUIRE(run_ktune("generate --model tiny --ctx 8 --max-tokens 1 --threads 2 --json --prompt " + prompt, &out) == 0);
    CHECK(nlohmann::json::parse(out).at("prompt") == nlohmann::json::array({3, 4, 5}));
  }
  CHECK(run_bad("generate --model tiny --prompt \"1 ,, 2\"", &out) == 2);
  CHECK_THAT(out, Catch::Contains("--prompt has an empty item"));
}

TEST_CASE("CLI: bench e2e prints the medians of the trials under the seeds' mean and std columns", "[cli]") {
  std::string out;
  REQUIRE(run_ktune("bench e2e --model tiny --ctx 8 --batch 1 --warmup 0 --trials 3 --with-optimizer", &out) == 0);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("| fwd avg (sec) | fwd std (sec) |"));
  const auto medians = lines_starting(out, "medians of the trials (ms): ");
  REQUIRE(medians.size() == 1);
  CHECK_THAT(medians[0], Catch::Matches("medians of the trials \\(ms\\): forward [0-9.]+, backward [0-9.]+, "
                                        "optimizer [0-9.]+, step [0-9.]+"));
  // tiny at ctx 8, batch 1: 8 tokens of 6 x (2 x (4 x 64^2 + 3 x 64 x 192) + 128 x 64) + 12 x 2 x 64 x 8 FLOPs,
  // 5.603 million.
  CHECK(lines_starting(out, "model TFLOP/s at the step median (PaLM's count, 0.0056 GFLOP a step): ").size() == 1);
  // The host emulation's times give no rate: they say nothing of a GPU's.
  REQUIRE(run_ktune("bench e2e --model tiny --ctx 8 --batch 1 --warmup 0 --trials 1 --with-optimizer --backend emu",
                    &out) == 0);
  CHECK(lines_starting(out, "medians of the trials (ms): ").size() == 1);
  CHECK_THAT(out, !Catch::Contains("TFLOP/s"));
}

TEST_CASE("CLI: bench e2e --sweep prints seed 002's grid for each model, a run per row, its derived tables, and sets "
          "the shape itself",
          "[cli]") {
  const auto json = ktune::test::scratch_dir("bench_e2e_sweep") / "sweep.json";
  std::string out;
  REQUIRE(run_ktune("bench e2e --model tiny --threads 2 --sweep --json-out " + json.string(), &out) == 0);
  INFO(out);
  const auto rows = lines_starting(out, "| tiny | 64 |");
  REQUIRE(rows.size() == 12);
  std::size_t i = 0;
  const nlohmann::json runs = nlohmann::json::parse(std::ifstream(json));
  REQUIRE(runs.size() == 12);
  for (const int ctx : {128, 256})
    for (const int warmup : {0, 1, 5})
      for (const char* forward_only : {"False", "True"}) {
        INFO(rows[i]);
        CHECK_THAT(rows[i], Catch::StartsWith(fmt::format("| tiny | 64 | {} | 2 | 4 | 4 | {} | 10 | {} | ", ctx, warmup,
                                                          forward_only)));
        CHECK(runs[i].at("context_length") == ctx);
        CHECK(runs[i].at("num_warmups") == warmup);
        CHECK(runs[i].at("passes") == (forward_only[0] == 'T' ? "forward" : "forward_backward"));
        ++i;
      }
  // Seed 002's mean time by warm-up count and summary statistics, of the rows' mean_time_ms (and std_time_ms).
  std::vector<double> means;
  double at_warmup[3] = {0, 0, 0};
  for (const auto& run : runs) {
    const auto& timed = run.at(run.at("passes") == "forward" ? "forward" : "forward_backward");
    means.push_back(timed.at("mean_ms"));
    const int w = run.at("num_warmups");
    at_warmup[w == 0 ? 0 : w == 1 ? 1 : 2] += means.back() / 4;  // 4 rows each: 2 contexts x 2 passes
  }
  CHECK_THAT(out, Catch::Contains(fmt::format("| tiny | {:.2f} | {:.2f} | {:.2f} |", at_warmup[0], at_warmup[1],
                                              at_warmup[2])));
  std::sort(means.begin(), means.end());
  const double median = (means[5] + means[6]) / 2, q1 = means[2] + 0.75 * (means[3] - means[2]);
  CHECK_THAT(out, Catch::Contains("| count | 12 | 12 |"));
  CHECK_THAT(out, Catch::Contains(fmt::format("| 50% | {:.2f} |", median)));
  CHECK_THAT(out, Catch::Contains(fmt::format("| 25% | {:.2f} |", q1)));
  CHECK_THAT(out, Catch::Contains(fmt::format("| max | {:.2f} |", means.back())));

  // Several models (sized alike): the grid for each, a row each in the warm-up table.
  REQUIRE(run_ktune("bench e2e --model tiny,small --vocab 128 --d-model 32 --d-ff 64 --layers 1 --heads 2 --threads 1 "
                    "--sweep",
                    &out) == 0);
  CHECK(lines_starting(out, "| custom | 32 |").size() == 24);
  CHECK(lines_starting(out, "| custom | ").size() == 24 + 2);
  CHECK_THAT(out, Catch::Contains("| count | 24 | 24 |"));

  // The grid sets the context, batch, warm-ups, trials and passes.
  for (const char* clash : {"--ctx 64", "--warmup 2", "--forward-only", "--trials 3"}) {
    INFO(clash);
    CHECK(run_ktune(std::string("bench e2e --model tiny --sweep ") + clash, &out) == 2);
    CHECK_THAT(out, Catch::Contains("--sweep") && Catch::Contains("excludes"));
  }
}

}  // namespace cli_cli_test
