// The ktune executable on input that would have cost the user a file or a
// run: outputs naming an input or each other, empty paths, files that are no
// files, empty list items, a non-log to resume, cache filters no entry has,
// corrupt caches, options that do not go together, files another ktune
// writes. Each is one line on stderr, exit 2, before anything is written.
// And what a run leaves when its output cannot be written, or after a kill.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/files.hpp"
#include "base/safetensors.hpp"
#include "cache/store.hpp"
#include "support.hpp"
#include "model/config.hpp"
#include "model/step_kernels.hpp"
#include "templates/family.hpp"
#include "tuner/session/session.hpp"

namespace cli_input_checks_test {

using ktune::test::ktune_exe;
using ktune::test::run_command;

namespace {

/// Runs ktune with stdout discarded; `err` gets stderr. A refusal (exit 2)
/// must be one line.
int run_bad(const std::string& args, std::string* err) {
  const int code = run_command("{ " + ktune_exe().string() + " " + args + " >/dev/null; }", err);
  if (code == 2) CHECK(err->find('\n') + 1 == err->size());
  return code;
}

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("CLI: an output naming an input or another output is refused before the run", "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-distinct");
  const auto tokens = dir / "tokens.u16";
  std::ofstream(tokens, std::ios::binary) << std::string(4096, '\0');  // token 0, 2048 times
  const std::string before = read_all(tokens);
  const std::string train = "train --model tiny --ctx 8 --batch 2 --steps 1 ";
  std::string err;
  CHECK(run_bad(train + "--tokens " + tokens.string() + " --save " + tokens.string(), &err) == 2);
  CHECK_THAT(err, Catch::Contains("--save and --tokens name the same file"));
  CHECK(read_all(tokens) == before);
  // Two spellings of one path that does not exist yet.
  const auto w = dir / "w.safetensors";
  CHECK(run_bad(train + "--save " + w.string() + " --checkpoint " + (dir / "sub" / ".." / "w.safetensors").string(),
                &err) == 2);
  CHECK_THAT(err, Catch::Contains("--save and --checkpoint name the same file"));
  CHECK(run_bad(train + "--metrics " + w.string() + " --checkpoint " + w.string(), &err) == 2);
  CHECK_FALSE(std::filesystem::exists(w));
  CHECK(run_bad("eval --model tiny --ctx 8 --tokens " + tokens.string() + " --dump " + tokens.string(), &err) == 2);
  CHECK(read_all(tokens) == before);
  // A run refused after its outputs were checked leaves no folder behind.
  CHECK(run_bad(train + "--heads 3 --save " + (dir / "nd" / "sub" / "x.st").string() + " --metrics " +
                    (dir / "nm" / "m.jsonl").string(),
                &err) == 2);
  CHECK_THAT(err, Catch::Contains("heads (3) must divide d_model"));
  CHECK_FALSE(std::filesystem::exists(dir / "nd"));
  CHECK_FALSE(std::filesystem::exists(dir / "nm"));
  // Distinct files still run.
  CHECK(run_command(ktune_exe().string() + " " + train + "--tokens " + tokens.string() + " --save " + w.string(),
                    &err) == 0);
  CHECK(std::filesystem::exists(w));
}

TEST_CASE("CLI: a benchmark's --json-out naming its --cache is refused before the run, the cache kept", "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-bench-distinct");
  const auto cache = dir / "tuned.json";
  std::ofstream(cache) << R"({"format": "ktune-tuned-cache", "schema_version": 1, "entries": []})" << "\n";
  const std::string before = read_all(cache);
  // Refused before the device is looked for: the report would have replaced the tuned cache.
  for (const char* bench : {"bench adam", "bench ops", "bench attention"}) {
    INFO(bench);
    std::string err;
    CHECK(run_command("KTUNE_NO_DEVICE=1 " + ktune_exe().string() + " " + bench + " --cache " + cache.string() +
                          " --json-out " + (dir / "sub" / ".." / "tuned.json").string(),
                      &err) == 2);
    CHECK_THAT(err, Catch::Contains("--json-out and --cache name the same file"));
    CHECK(read_all(cache) == before);
  }
}

TEST_CASE("CLI: a model run's --cache that does not exist is refused where nothing would write it", "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-model-cache-missing");
  const std::string typo = (dir / "tunde.json").string();
  for (const char* command : {"bench e2e --backend emu --mode compiled --model tiny --ctx 8 --batch 1 --warmup 0 "
                              "--trials 1",
                              "train --backend emu --model tiny --ctx 8 --batch 1 --steps 1",
                              "eval --backend emu --model tiny --ctx 8 --batch 1"}) {
    INFO(command);
    std::string err;
    CHECK(run_bad(std::string(command) + " --cache " + typo, &err) == 2);
    CHECK_THAT(err, Catch::Contains("--cache " + typo + " does not exist; the emu backend only reads a tuned cache"));
    CHECK_FALSE(std::filesystem::exists(typo));
  }
  // The cuda backend writes its GEMMs' choices there: one not there yet is said, before the device is looked for.
  std::string err;
  CHECK(run_command("KTUNE_NO_DEVICE=1 " + ktune_exe().string() + " bench e2e --backend cuda --model tiny --ctx 8 "
                    "--batch 1 --cache " + typo, &err) == 2);
  CHECK_THAT(err, Catch::Contains("note: --cache " + typo + " does not exist yet: every kernel runs at its family "
                                  "default, and the GEMMs' timed choices go into it"));
}

TEST_CASE("CLI: an empty path or a file that is no regular file is refused", "[cli]") {
  std::string err;
  for (const char* args : {"train --model tiny --steps 1 --save ''", "train --model tiny --steps 1 --metrics ''",
                           "eval --model tiny --dump ''", "bench adam --backend emu --json-out ''",
                           "tune --family prim_neg --backend emu --log ''", "render --family adamw --problem ''",
                           "run --family adamw --config ''"}) {
    INFO(args);
    CHECK(run_bad(args, &err) == 2);
    CHECK_THAT(err, Catch::Contains("empty"));
  }
  for (const char* args : {"eval --model tiny --weights /dev/zero", "train --model tiny --steps 1 --tokens /dev/zero",
                           "replay --dataset /dev/zero", "render --spec /dev/zero",
                           "tune --family prim_neg --backend emu --problem '{\"dtype\":\"f32\",\"dims\":{\"n\":64}}' "
                           "--budget 1 --log /dev/zero"}) {
    INFO(args);
    CHECK(run_bad(args, &err) == 2);
    CHECK_THAT(err, Catch::Contains("not a regular file"));
  }
  // '-' is stdout where an option writes there (cache export --out); elsewhere it would make a file named '-'.
  for (const char* args : {"train --model tiny --steps 1 --metrics -", "train --model tiny --steps 1 --save -",
                           "bench adam --backend emu --json-out -",
                           "tune --family prim_neg --backend emu --problem '{\"dtype\":\"f32\",\"dims\":{\"n\":64}}' "
                           "--budget 1 --cache -"}) {
    INFO(args);
    CHECK(run_bad(args, &err) == 2);
    CHECK_THAT(err, Catch::Contains("'-' is no file, and this option does not write to stdout"));
  }
  CHECK_FALSE(std::filesystem::exists("-"));
  // /dev/stdout a pipe: the link's text (pipe:[N]) is no path to follow.
  CHECK(run_command("{ " + ktune_exe().string() + " train --model tiny --steps 1 --metrics /dev/stdout 2>&1 | cat; }",
                    &err) == 0);
  CHECK(err == "ktune: cannot write --metrics /dev/stdout: it is not a regular file; give a writable file path\n");
  // /dev/stdout sent to a file: the write replaced that file (what was appended to it before lost), and what the
  // command printed went to the file it replaced.
  const auto log = ktune::test::scratch_dir("cli-descriptor") / "run.log";
  std::ofstream(log) << "kept\n";
  for (const char* out : {"/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"}) {
    INFO(out);
    CHECK(run_command("{ " + ktune_exe().string() + " eval --model tiny --ctx 8 --batch 2 --dump " + out + " >> " +
                          log.string() + "; }",
                      &err) == 2);
    CHECK_THAT(err, Catch::Contains("it names an open file descriptor (standard output, or another), not a file"));
    CHECK(read_all(log) == "kept\n");
  }
}

TEST_CASE("CLI: train refuses settings fp32 AdamW cannot hold and validation options without validations", "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-train-checks");
  const std::string train = "train --model tiny --ctx 8 --batch 2 --steps 1 ";
  std::string err;
  CHECK(run_bad(train + "--beta2 0.9999999999", &err) == 2);
  CHECK_THAT(err, Catch::Contains("round to below 1 in fp32"));
  CHECK(run_bad(train + "--eps 1e-50", &err) == 2);
  CHECK_THAT(err, Catch::Contains("--eps rounds to 0"));
  // A value past fp32's largest is inf there: the run would train on inf, or end NaN a step later.
  for (const char* option : {"--lr 1e39", "--weight-decay 1e39", "--clip-norm 1e39", "--eps 1e39",
                             "--lr-schedule cosine --min-lr 3.5e38"}) {
    INFO(option);
    CHECK(run_bad(train + option, &err) == 2);
    CHECK_THAT(err, Catch::Contains("must be a finite number in [0, 3.40282e+38], got '") ||
                        Catch::Contains("must be a finite number in (0, 3.40282e+38], got '"));
  }
  CHECK(run_bad(train + "--eval-batches 3", &err) == 2);
  CHECK_THAT(err, Catch::Contains("--eval-batches requires --eval-every"));
  CHECK(run_bad(train + "--eval-batches 3 --eval-every 0", &err) == 2);
  CHECK_THAT(err, Catch::Contains("--eval-batches shapes the validations of --eval-every N"));
  // A token file shorter than a window and its next token.
  const auto two = dir / "two.u16";
  std::ofstream(two, std::ios::binary) << std::string(4, '\0');
  CHECK(run_bad(train + "--tokens " + two.string(), &err) == 2);
  CHECK_THAT(err, Catch::Contains("2 tokens hold no window of --ctx 8"));
  CHECK(run_bad("eval --model tiny --ctx 8 --tokens " + two.string(), &err) == 2);
  // A huge --accumulate is refused before anything is sized by it.
  CHECK(run_bad(train + "--accumulate 2305843009213693952", &err) == 2);
  CHECK_THAT(err, Catch::Contains("each must be at most 2147483647"));
  CHECK(run_bad("train --model tiny --ctx 32 --batch 100000000", &err) == 2);  // one batch a step: no micro-batches
  CHECK_THAT(err, Catch::Contains("a step of 100000000 windows of 32 tokens: more than 2147483647 tokens"));
  CHECK(run_bad("generate --model tiny --prompt 1 --eos 4294967301", &err) == 2);
  // Numbers past the type's range are refused, not clamped to its end.
  CHECK(run_bad(train + "--seed 99999999999999999999", &err) == 2);
  CHECK_THAT(err, Catch::Contains("past the largest"));
  CHECK(run_bad(train + "--steps 99999999999999999999", &err) == 2);
  // A resumed run's --metrics that is no run's records is refused, not rewritten.
  const auto ckpt = dir / "r.ckpt";
  REQUIRE(run_command(ktune_exe().string() + " " + train + "--checkpoint " + ckpt.string(), &err) == 0);
  const auto notes = dir / "notes.txt";
  std::ofstream(notes) << "my notes\nmore notes\n";
  CHECK(run_bad("train --model tiny --ctx 8 --batch 2 --steps 2 --checkpoint " + ckpt.string() +
                    " --resume --metrics " + notes.string(),
                &err) == 2);
  CHECK_THAT(err, Catch::Contains("line 1 is no step record"));
  CHECK(read_all(notes) == "my notes\nmore notes\n");
  // And so is it for a new run, which would replace it: a file of one line too.
  std::ofstream(notes) << "my notes\n";
  CHECK(run_bad(train + "--metrics " + notes.string(), &err) == 2);
  CHECK_THAT(err, Catch::Contains("line 1 is no step record"));
  CHECK(read_all(notes) == "my notes\n");
  // A record cut short at any byte (a kill, a full disk), down to its "{", is dropped, and the run goes on.
  const auto copy = dir / "copy.ckpt", metrics = dir / "m.jsonl";
  std::filesystem::copy_file(ckpt, copy);
  std::ofstream(metrics) << "{\"step\":1}\n{";
  REQUIRE(run_command(ktune_exe().string() + " train --model tiny --ctx 8 --batch 2 --steps 2 --checkpoint " +
                          copy.string() + " --resume --metrics " + metrics.string() + " >/dev/null",
                      &err) == 0);
  std::ifstream records(metrics);
  std::vector<std::int64_t> steps;
  for (std::string line; std::getline(records, line);) steps.push_back(nlohmann::json::parse(line).at("step"));
  CHECK(steps == std::vector<std::int64_t>{1, 2});
  // Without --resume, a run would write over the checkpoint: a forgotten --resume lost the run's progress.
  const std::string checkpointed = read_all(ckpt);
  CHECK(run_bad(train + "--checkpoint " + ckpt.string(), &err) == 2);
  CHECK_THAT(err, Catch::Contains("holds the checkpoint of step 1: give --resume to go on from it"));
  CHECK(read_all(ckpt) == checkpointed);
  // Nor are weights written over it: --save and --save-best would lose its AdamW state and step.
  CHECK(run_bad(train + "--save " + ckpt.string(), &err) == 2);
  CHECK_THAT(err, Catch::Contains("--save " + ckpt.string() + " holds a training checkpoint"));
  CHECK(run_bad(train + "--eval-every 1 --save-best " + ckpt.string(), &err) == 2);
  CHECK_THAT(err, Catch::Contains("--save-best " + ckpt.string() + " holds a training checkpoint"));
  CHECK(read_all(ckpt) == checkpointed);
  // As --weights it starts a new run from its weights alone, which is said.
  CHECK(run_command(ktune_exe().string() + " " + train + "--weights " + ckpt.string(), &err) == 0);
  CHECK_THAT(err, Catch::Contains("note: --weights " + ckpt.string() + " is a training checkpoint: this run starts "
                                  "at step 1 from its weights, without its AdamW state and step"));
  CHECK(run_bad(train + "--mode eager", &err) == 2);  // the cpu backend's one path
  CHECK_THAT(err, Catch::Contains("--mode eager chooses the kernels of --backend cuda or emu"));
}

TEST_CASE("CLI: a list with an empty item is refused and not read short", "[cli]") {
  std::string err;
  for (const char* args : {"bench memory --model tiny --ctx 16,", "bench memory --model tiny, --ctx 16",
                           "bench memory --model tiny --ctx 16,,32", "bench adam --backend emu --tensors 1,",
                           "bench ops --backend emu --families rmsnorm_fwd,", "generate --model tiny --prompt 1,,2",
                           "generate --model tiny --prompt ,", "generate --model tiny --prompt 1 2,",
                           "generate --model tiny --prompt 4294967296"}) {
    INFO(args);
    CHECK(run_bad(args, &err) == 2);
  }
  CHECK(run_bad("bench memory --model tiny --ctx 16,", &err) == 2);
  CHECK_THAT(err, Catch::Contains("--ctx has an empty item in '16,'"));
  CHECK(run_bad("generate --model tiny --prompt 1,,2", &err) == 2);  // was read as 1 2
  CHECK_THAT(err, Catch::Contains("--prompt has an empty item in '1,,2'"));
  CHECK(run_bad("generate --model tiny --prompt --max-tokens 5", &err) == 2);  // not "got '--max-tokens,5'"
  CHECK_THAT(err, Catch::Contains("--prompt takes token ids, not the option '--max-tokens'"));
}

TEST_CASE("CLI: tune --resume refuses a file that is no session log, a new session too, and --timeout a time that is "
          "none",
          "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-resume");
  const auto notes = dir / "notes.txt";
  std::ofstream(notes) << "my notes\n";
  const auto cache = dir / "tuned.json";
  const std::string tune = "tune --backend emu --family prim_neg --problem '{\"dtype\":\"f32\",\"dims\":{\"n\":64}}' "
                           "--cache " + cache.string() + " ";
  std::string err;
  CHECK(run_bad(tune + "--resume --log " + notes.string(), &err) == 2);
  CHECK_THAT(err, Catch::Contains("is not a ktune session log"));
  CHECK(run_bad(tune + "--log " + notes.string(), &err) == 2);  // a new session would truncate it
  CHECK_THAT(err, Catch::Contains("is not a ktune session log") && Catch::Contains("give another path"));
  CHECK(read_all(notes) == "my notes\n");
  CHECK_FALSE(std::filesystem::exists(cache));
  // A log whose results another kernel source gave (the kernel was edited since) is not resumed.
  const auto log = dir / "edited.log";
  REQUIRE(run_command("{ " + ktune_exe().string() + " " + tune + "--budget 2 --log " + log.string() + " 2>&1; }",
                      &err) == 0);
  std::string lines = read_all(log);
  const auto header = nlohmann::json::parse(lines.substr(0, lines.find('\n')));
  REQUIRE(header.at("session").contains("source_hash"));
  nlohmann::json edited = header;
  edited["session"]["source_hash"] = "0123";
  std::ofstream(log) << edited.dump() << lines.substr(lines.find('\n'));
  CHECK(run_bad(tune + "--budget 3 --resume --log " + log.string(), &err) == 2);
  CHECK_THAT(err, Catch::Contains("holds results of kernel source \"0123\"") &&
                      Catch::Contains("give another --log (or remove it) to start anew"));
  // Without --resume too: the message offers no --resume that would be refused.
  CHECK(run_bad(tune + "--budget 3 --log " + log.string(), &err) == 2);
  CHECK_THAT(err, Catch::Contains("holds results of kernel source \"0123\"") && !Catch::Contains("give --resume"));
  // Nor one whose code another NVRTC compiled.
  REQUIRE(header.at("session").contains("nvrtc"));
  nlohmann::json other_nvrtc = header;
  other_nvrtc["session"]["nvrtc"] = "11.8";
  std::ofstream(log) << other_nvrtc.dump() << lines.substr(lines.find('\n'));
  CHECK(run_bad(tune + "--budget 3 --resume --log " + log.string(), &err) == 2);
  CHECK_THAT(err, Catch::Contains("holds results of NVRTC \"11.8\""));
  for (const char* timeout : {"0", "-1", "nan", "inf", "1e300"}) {
    INFO(timeout);
    CHECK(run_bad(tune + "--log " + (dir / "t.log").string() + " --timeout " + timeout, &err) == 2);
    CHECK_THAT(err, Catch::Contains("--timeout"));
  }
  CHECK_FALSE(std::filesystem::exists(dir / "t.log"));
}

TEST_CASE("CLI: cache show marks entries of another kernel source stale or a config off the space and prune --stale "
          "drops them",
          "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-cache-stale");
  auto cache = nlohmann::json::parse(read_all(std::filesystem::path(KTUNE_SOURCE_DIR) /
                                              "tests/cache/golden/tuned_v1.json"));  // two adamw entries, stale
  auto current = cache["entries"][0];
  current["key"]["source_hash"] = ktune::templates::find_family("adamw").source_hash();
  current["key"]["problem_key"] = "f32;numel=8;tensors=4";
  current["key"]["dims"] = {{"numel", 8}, {"tensors", 4}};
  current["config"] = ktune::templates::find_family("adamw")
                          .default_config(ktune::templates::Problem{"f32", {{"tensors", 4}, {"numel", 8}}})
                          .to_json();
  cache["entries"].push_back(current);
  // A config whose parameter's name a damaged file (or another build) changed: off the space, as the lookup sees it.
  auto garbled = current;
  garbled["key"]["problem_key"] = "f32;numel=16;tensors=4";
  garbled["key"]["dims"] = {{"numel", 16}, {"tensors", 4}};
  const std::string name = garbled["config"].begin().key();
  garbled["config"]["x" + name] = garbled["config"][name];
  garbled["config"].erase(name);
  cache["entries"].push_back(garbled);
  std::ofstream(dir / "c.json") << cache.dump();
  std::string out;
  REQUIRE(run_command(ktune_exe().string() + " --json cache show " + (dir / "c.json").string(), &out) == 0);
  std::vector<std::string> states;
  for (const auto& e : nlohmann::json::parse(out)) states.push_back(e.at("source"));
  CHECK(states == std::vector<std::string>{"stale", "stale", "current", "off the space"});
  REQUIRE(run_command(ktune_exe().string() + " cache prune --stale " + (dir / "c.json").string(), &out) == 0);
  CHECK_THAT(out, Catch::Contains("3 entries dropped"));
  const auto kept = nlohmann::json::parse(read_all(dir / "c.json"))["entries"];
  REQUIRE(kept.size() == 1);
  CHECK(kept[0]["key"]["problem_key"] == "f32;numel=8;tensors=4");
}

TEST_CASE("CLI: a cache filter no entry has is refused and the file left as it was", "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-cache-filter");
  const auto file = dir / "mine.json";
  std::filesystem::copy_file(std::filesystem::path(KTUNE_SOURCE_DIR) / "tests/cache/golden/tuned_v1.json", file);
  const std::string before = read_all(file);
  std::string err;
  for (const std::string& args :
       {"prune " + file.string() + " --driver 13000x", "prune " + file.string() + " --nvrtc bogus",
        "prune " + file.string() + " --source-hash xyz", "prune " + file.string() + " --family bogus",
        "export " + file.string() + " --family rmsnorm_fwdd --out " + (dir / "out.json").string(),
        "export " + file.string() + " --dtype f64 --out " + (dir / "out.json").string(),
        "show " + file.string() + " --arch sm_12"}) {
    INFO(args);
    CHECK(run_bad("cache " + args, &err) == 2);
    CHECK_THAT(err, Catch::Contains("no entry of the cache has it") && Catch::Contains("it holds"));
    CHECK(read_all(file) == before);
  }
  CHECK_FALSE(std::filesystem::exists(dir / "out.json"));
  // Filters each held, but by no entry together: nothing to export, nothing written.
  auto two = nlohmann::json::parse(before);
  two["entries"][0]["key"]["arch"] = "sm_80";
  two["entries"][1]["key"]["gpu_name"] = "another GPU";
  std::ofstream(dir / "two.json") << two.dump();
  CHECK(run_bad("cache export " + (dir / "two.json").string() + " --arch sm_80 --gpu 'another GPU' --out " +
                    (dir / "out.json").string(),
                &err) == 2);
  CHECK_THAT(err, Catch::Contains("matches all the filters"));
  // A source hash is one family's: without --family it would drop every other family's entries.
  auto families = nlohmann::json::parse(before);
  families["entries"][1]["key"]["family"] = "swiglu_fwd";
  std::ofstream(dir / "families.json") << families.dump();
  const std::string families_before = read_all(dir / "families.json");
  const std::string hash = families["entries"][0]["key"]["source_hash"];
  CHECK(run_bad("cache prune " + (dir / "families.json").string() + " --source-hash " + hash, &err) == 2);
  CHECK_THAT(err, Catch::Contains("--source-hash is one family's: give --family too"));
  // A filtered copy onto its own input would drop what the filters leave out.
  CHECK(run_bad("cache export " + (dir / "families.json").string() + " --family adamw --out " +
                    (dir / "families.json").string(),
                &err) == 2);
  CHECK_THAT(err, Catch::Contains("--out") && Catch::Contains("file"));
  CHECK(read_all(dir / "families.json") == families_before);
  // A filtered copy says what it wrote, on stdout, as merge and prune do; as JSON under --json.
  std::string out;
  REQUIRE(run_command("{ " + ktune_exe().string() + " cache export " + (dir / "families.json").string() +
                          " --family adamw --out " + (dir / "adamw.json").string() + " 2>/dev/null; }",
                      &out) == 0);
  CHECK(out == "1 entry of " + (dir / "families.json").string() + " written to " + (dir / "adamw.json").string() +
                   "\n");
  REQUIRE(run_command("{ " + ktune_exe().string() + " --json cache export " + (dir / "families.json").string() +
                          " --family adamw --out " + (dir / "adamw-json.json").string() + " 2>/dev/null; }",
                      &out) == 0);
  CHECK(nlohmann::json::parse(out) == nlohmann::json{{"file", (dir / "families.json").string()},
                                                     {"out", (dir / "adamw-json.json").string()},
                                                     {"entries", 1}});
  // A corrupt cache is bad input (exit 2), as a missing one is.
  std::ofstream(dir / "bad.json") << "{bad";
  CHECK(run_bad("cache show " + (dir / "bad.json").string(), &err) == 2);
  CHECK_THAT(err, Catch::Contains("not valid JSON"));
}

TEST_CASE("CLI: cache prune --nvrtc no entry has names the NVRTC versions held and not the GEMM entries' empty one",
          "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-cache-prune-nvrtc");
  auto cache = nlohmann::json::parse(read_all(std::filesystem::path(KTUNE_SOURCE_DIR) /
                                              "tests/cache/golden/tuned_v1.json"));
  auto gemm = cache["entries"][0];  // a cuBLASLt algorithm as compiled mode stores it: nothing compiled
  gemm["key"]["family"] = "gemm";
  gemm["key"]["source_hash"] = "cublasLt 130100";
  gemm["key"]["nvrtc_version"] = "";
  cache["entries"].push_back(gemm);
  std::ofstream(dir / "mixed.json") << cache.dump();
  std::string err;
  CHECK(run_bad("cache prune " + (dir / "mixed.json").string() + " --nvrtc 12.4", &err) == 2);
  CHECK_THAT(err, Catch::EndsWith("it holds 13.0\n"));
  // Only GEMM entries: none was compiled, so no NVRTC version can be held.
  cache["entries"] = nlohmann::json::array({gemm});
  std::ofstream(dir / "gemm.json") << cache.dump();
  CHECK(run_bad("cache prune " + (dir / "gemm.json").string() + " --nvrtc 13.0", &err) == 2);
  CHECK_THAT(err, Catch::Contains("it holds no entries compiled by NVRTC"));
}

TEST_CASE("CLI: tune --model refuses a --log prefix one of whose kernels' logs holds results before any search",
          "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-tune-model-log");
  // The step's last kernels (grad_norm, AdamW) have the same problems at every --ctx and --batch: a session at
  // another shape, under the same prefix, logged them.
  const auto& family = ktune::templates::find_family("grad_norm");
  const auto problem = ktune::model::grad_norm_problem(ktune::model::model_config("tiny"), false);
  const auto tail = std::filesystem::path(ktune::tuner::default_log_path(family, problem)).filename();
  const auto log = dir / ("run." + tail.string());
  std::ofstream(log) << "{\"session\":{\"family\":\"grad_norm\"}}\n{\"config\":{}}\n";
  const std::string before = read_all(log);
  std::string err;
  CHECK(run_bad("tune --backend emu --model tiny --ctx 8 --batch 1 --budget 1 --log " + (dir / "run").string() +
                    " --cache " + (dir / "tuned.json").string(),
                &err) == 2);
  CHECK_THAT(err, Catch::Contains(log.string() + " holds the results of a session of grad_norm") &&
                      Catch::Contains("--resume"));
  CHECK_FALSE(std::filesystem::exists(dir / "tuned.json"));
  CHECK(read_all(log) == before);
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& f : std::filesystem::directory_iterator(dir)) ++files;
  CHECK(files == 1);  // no other kernel's log: none was searched
  // So is a prefix where no log can be written, in one line, before the first kernel's line.
  std::ofstream(dir / "file") << "a file\n";
  CHECK(run_bad("tune --backend emu --model tiny --ctx 8 --batch 1 --budget 1 --log " +
                    (dir / "file" / "run").string() + " --cache " + (dir / "tuned.json").string(),
                &err) == 2);
  CHECK_THAT(err, Catch::StartsWith("ktune: cannot write --log " + (dir / "file" / "run").string() + ".") &&
                      Catch::Contains("is not a folder"));
  CHECK(err.find('\n') + 1 == err.size());
  CHECK_FALSE(std::filesystem::exists(dir / "tuned.json"));
}

TEST_CASE("CLI: render refuses options it would ignore and an unknown subcommand is named", "[cli]") {
  std::string err;
  CHECK(run_bad("render --family rmsnorm_fwd --space --config '{\"threads\":7}'", &err) == 2);
  CHECK_THAT(err, Catch::Contains("--config"));
  CHECK(run_bad("compile --family adamw --quiet --verbose", &err) == 2);
  CHECK(run_bad("bench e2e --model tiny --ctx 8 --trials 1 --clip-norm 1", &err) == 2);
  CHECK_THAT(err, Catch::Contains("--with-optimizer"));
  CHECK(run_bad("run --backend emu --family adamw --time", &err) == 2);
  CHECK_THAT(err, Catch::Contains("--time times the variant on the GPU"));
  CHECK(run_bad("render --family rmsnorm_fwd --space --arch bogus", &err) == 2);
  CHECK_THAT(err, Catch::Contains("unknown architecture 'bogus'"));
  CHECK(run_bad("render --family rmsnorm_fwd --problem '{\"dtype\":\"f32\",\"dims\":{\"rows\":4,\"dim\":64},\"x\":1}'",
                &err) == 2);
  CHECK_THAT(err, Catch::Contains("unknown key 'x'"));
  CHECK(run_bad("bench bogus", &err) == 2);
  CHECK_THAT(err, Catch::Contains("unknown subcommand 'bogus' of bench") && Catch::Contains("e2e"));
  CHECK(run_bad("cache nope", &err) == 2);
  CHECK_THAT(err, Catch::Contains("unknown subcommand 'nope' of cache") && Catch::Contains("prune"));
  // With --help too: the top-level help with exit 0 did not say the word names no command.
  CHECK(run_bad("verify --help", &err) == 2);
  CHECK_THAT(err, Catch::Contains("unknown subcommand 'verify' of ktune") && Catch::Contains("tune"));
  CHECK(run_bad("cache nope --help", &err) == 2);
  CHECK_THAT(err, Catch::Contains("unknown subcommand 'nope' of cache"));
  // A command without its subcommand lists them; an unknown option where one is missing is named.
  CHECK(run_bad("", &err) == 2);
  CHECK_THAT(err, Catch::StartsWith("ktune: give a command, one of: devices, render, compile, tune, bench"));
  CHECK(run_bad("cache", &err) == 2);
  CHECK_THAT(err, Catch::StartsWith("ktune: cache needs a subcommand, one of: show, size, clean, merge, prune"));
  CHECK(run_bad("--frob", &err) == 2);
  CHECK_THAT(err, Catch::StartsWith("ktune: unknown option '--frob' of ktune"));
  // replay checks its strategies and budgets before it prints anything.
  nlohmann::json kt = {
      {"tune_params_keys", {"a"}}, {"tune_params", {{"a", {1, 2, 3}}}}, {"cache", nlohmann::json::object()}};
  for (int a = 1; a <= 3; ++a) kt["cache"][std::to_string(a)] = {{"a", a}, {"time", 1.0 + a}, {"benchmark_time", 9.0}};
  const auto dataset = ktune::test::scratch_dir("cli-replay-checks") / "kt.json";
  std::ofstream(dataset) << kt.dump();
  const std::string replay = ktune_exe().string() + " replay --dataset " + dataset.string();
  std::string out;
  for (const char* args : {" --strategy bogus", " --strategy random,", " --budget 5,,6"}) {
    INFO(args);
    CHECK(run_command("{ " + replay + args + " 2>/dev/null; }", &out) == 2);
    CHECK(out.empty());
  }
  REQUIRE(run_command("{ " + replay + " --strategy random --runs 2 2>/dev/null; }", &out) == 0);
  CHECK_FALSE(out.empty());
}

TEST_CASE("CLI: a problem no config of the space fits is said so with the default's reason", "[cli]") {
  // vector_add with a grid that is no whole number of blocks at n = 100000, whatever the config.
  const auto dir = ktune::test::scratch_dir("cli-no-valid-config");
  const auto example = std::filesystem::path(KTUNE_SOURCE_DIR) / "examples/vector_add";
  std::filesystem::copy_file(example / "vector_add.cu", dir / "vector_add.cu",
                             std::filesystem::copy_options::overwrite_existing);
  nlohmann::json spec = nlohmann::json::parse(read_all(example / "vector_add.json"));
  spec["grid"] = "n / (block * vec)";
  std::ofstream(dir / "frac.json") << spec.dump();
  const std::string with_spec = " --spec " + (dir / "frac.json").string();
  std::string out;
  REQUIRE(run_command("{ " + ktune_exe().string() + " render --space" + with_spec + " --problem "
                          "'{\"dtype\":\"f32\",\"dims\":{\"n\":100000}}' 2>/dev/null; }",
                      &out) == 0);
  CHECK_THAT(out, Catch::Contains("0 valid for f32;n=100000 on sm_90") &&
                      Catch::Contains("no config runs it on sm_90") &&
                      Catch::Contains("vec                  {1, 2, 4}"));
  std::string err;
  CHECK(run_bad("run --backend emu" + with_spec, &err) == 2);
  // Some valid: tune says how many points are not, and where to read why.
  REQUIRE(run_command(ktune_exe().string() + " tune --backend emu --budget 2" + with_spec +
                          " --problem '{\"dtype\":\"f32\",\"dims\":{\"n\":96000}}' --cache " +
                          (dir / "c.json").string() + " --log " + (dir / "s.log").string(),
                      &out) == 0);
  CHECK_THAT(out, Catch::Contains("note: 9 of the 15 points are not valid for f32;n=96000 on sm_90; `ktune render "
                                  "--space --spec " + (dir / "frac.json").string() + " --problem '"));
  // Named by the spec's file, where it is to be mended.
  CHECK_THAT(err, Catch::Contains((dir / "frac.json").string() + ": no config of the space is valid for f32;n=100000 "
                                  "on sm_90 (the default ") &&
                      Catch::Contains("is not a whole number"));
}

TEST_CASE("CLI: a session log or a run's checkpoint and metrics that another process writes are refused", "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-busy");
  const auto log = dir / "t.log", metrics = dir / "m.jsonl", checkpoint = dir / "c.ckpt";
  std::string err;
  {
    const ktune::FileLock other(log.string() + ".lock");  // as a running session holds it
    CHECK(run_bad("tune --backend emu --family prim_neg --problem '{\"dtype\":\"f32\",\"dims\":{\"n\":64}}' --log " +
                      log.string() + " --cache " + (dir / "tuned.json").string(),
                  &err) == 2);
    CHECK_THAT(err, Catch::Contains("session log " + log.string() + " is being written by another ktune process"));
  }
  {
    // The default log another session holds: this one logs beside it (a --resume would need that one: refused).
    const auto sessions = dir / "cache-dir" / "sessions";
    std::filesystem::create_directories(sessions);
    const ktune::FileLock other((sessions / "prim_neg.f32-n64.log").string() + ".lock");
    const std::string tune = "KTUNE_CACHE_DIR=" + (dir / "cache-dir").string() + " " + ktune_exe().string() +
                             " tune --backend emu --family prim_neg --problem "
                             "'{\"dtype\":\"f32\",\"dims\":{\"n\":64}}' --budget 2 --cache " +
                             (dir / "tuned.json").string();
    std::string out;
    REQUIRE(run_command("{ " + tune + " 2>/dev/null; }", &out) == 0);
    CHECK_THAT(out, Catch::Contains("session log " + (sessions / "prim_neg.f32-n64.").string()));
    CHECK_FALSE(std::filesystem::exists(sessions / "prim_neg.f32-n64.log"));
    CHECK(run_command("{ " + tune + " --resume >/dev/null; }", &err) == 2);
    CHECK_THAT(err, Catch::Contains("is being written by another ktune process"));
  }
  {
    // A cache folder where no file can be made: the default log's message names the variable that put it there.
    CHECK(run_command("{ KTUNE_CACHE_DIR=/proc/ktune-none " + ktune_exe().string() +
                          " tune --backend emu --family prim_neg --problem '{\"dtype\":\"f32\",\"dims\":{\"n\":64}}' "
                          "--budget 2 --cache " + (dir / "none.json").string() + " >/dev/null; }",
                      &err) == 2);
    CHECK_THAT(err, Catch::StartsWith("ktune: cannot write session log "
                                      "/proc/ktune-none/sessions/prim_neg.f32-n64.log") &&
                        Catch::EndsWith("; the default log goes under the cache folder (KTUNE_CACHE_DIR): set "
                                        "KTUNE_CACHE_DIR to a folder ktune may write, or give --log\n"));
    CHECK_FALSE(std::filesystem::exists(dir / "none.json"));
  }
  const std::string train = "train --model tiny --ctx 8 --batch 2 --steps 2 --checkpoint " + checkpoint.string() +
                            " --metrics " + metrics.string();
  {
    const ktune::FileLock other(metrics.string() + ".lock");
    CHECK(run_bad(train, &err) == 2);
    CHECK_THAT(err, Catch::Contains("--metrics " + metrics.string() + " is being written by another ktune process"));
  }
  {
    const ktune::FileLock other(checkpoint.string() + ".lock");
    CHECK(run_bad(train, &err) == 2);
    CHECK_THAT(err, Catch::Contains("--checkpoint " + checkpoint.string() + " is being written"));
  }
  {
    // A run whose folder is not there yet makes it to lock there: another one making it too is refused.
    const auto fresh = dir / "fresh" / "m.jsonl";
    const ktune::FileLock other(fresh.string() + ".lock", "--metrics " + fresh.string());
    CHECK(run_bad("train --model tiny --ctx 8 --batch 2 --steps 2 --metrics " + fresh.string(), &err) == 2);
    CHECK_THAT(err, Catch::Contains("--metrics " + fresh.string() + " is being written by another ktune process"));
    CHECK_FALSE(std::filesystem::exists(fresh));
  }
  CHECK_FALSE(std::filesystem::exists(dir / "fresh"));  // made for the lock, empty: gone with it
  CHECK_FALSE(std::filesystem::exists(log));
  CHECK_FALSE(std::filesystem::exists(metrics));
  CHECK_FALSE(std::filesystem::exists(checkpoint));
  // Once let go, the run goes on, and leaves no lock file behind.
  REQUIRE(run_command("{ " + ktune_exe().string() + " " + train + " >/dev/null 2>&1; }", &err) == 0);
  CHECK(std::filesystem::exists(checkpoint));
  CHECK_FALSE(std::filesystem::exists(checkpoint.string() + ".lock"));
  CHECK_FALSE(std::filesystem::exists(metrics.string() + ".lock"));
}

TEST_CASE("CLI: numbers past their type's range and a file that is no session log are named as such", "[cli]") {
  std::string err;
  CHECK(run_bad("run --backend emu --family rmsnorm_fwd --config '{\"threads\":9223372036854775808}'", &err) == 2);
  CHECK_THAT(err, Catch::Contains("'threads' is past the largest integer"));  // was wrapped to -2^63
  CHECK(run_bad("render --family rmsnorm_fwd --problem '{\"dtype\":\"f32\",\"dims\":{\"rows\":"
                "18446744073709551615,\"dim\":8}}'",
                &err) == 2);
  CHECK_THAT(err, Catch::Contains("'rows' is past the largest integer"));
  CHECK(run_bad("tune --backend emu --family prim_neg --problem '{\"dtype\":\"f32\",\"dims\":{\"n\":64}}' "
                "--budget 99999999999999999999",
                &err) == 2);
  CHECK_THAT(err, Catch::Contains("past the largest count of evaluations"));
  // Options that shape nothing here are refused, not ignored: a model's shape with --family, a timeout no worker
  // enforces.
  const std::string neg = "tune --backend emu --family prim_neg --problem '{\"dtype\":\"f32\",\"dims\":{\"n\":64}}' ";
  CHECK(run_bad(neg + "--ctx 999", &err) == 2);
  CHECK_THAT(err, Catch::Contains("--ctx shapes the kernels of --model"));
  CHECK(run_bad(neg + "--dtype bf16", &err) == 2);
  CHECK_THAT(err, Catch::Contains("--dtype shapes the kernels of --model"));
  // And one kernel's problem with --model, whose kernels take their shapes from --ctx, --batch and --dtype.
  const auto model_dir = ktune::test::scratch_dir("cli-model-problem");
  CHECK(run_bad("tune --backend emu --model tiny --budget 1 --problem '{\"dtype\":\"bf16\",\"dims\":{\"n\":64}}' "
                "--cache " + (model_dir / "c.json").string() + " --log " + (model_dir / "s").string(),
                &err) == 2);
  CHECK_THAT(err, Catch::Contains("--problem is one kernel's shape"));
  CHECK(std::filesystem::is_empty(model_dir));
  // A seed with nothing to draw: compile's --seed seeds --sample only.
  CHECK(run_bad("compile --family prim_neg --seed 3", &err) == 2);
  CHECK_THAT(err, Catch::Contains("--seed requires --sample"));
  CHECK(run_bad("compile --family prim_neg --all --sample 2", &err) == 2);  // and --help says so
  CHECK_THAT(err, Catch::Contains("--all excludes --sample") || Catch::Contains("--sample excludes --all"));
  // The emulated device's limits and worker threads, on a GPU (refused before any device is opened).
  for (const char* option : {"--arch sm_80", "--workers 2"}) {
    CHECK(run_bad(std::string("run --backend gpu --family prim_neg ") + option, &err) == 2);
    CHECK_THAT(err, Catch::Contains("--arch and --workers shape the emulation"));
  }
  CHECK(run_bad(neg + "--timeout 1 --no-isolate", &err) == 2);
  CHECK_THAT(err, Catch::Contains("--timeout excludes --no-isolate"));
  // A session none of whose configs ran says what stopped them (it said none "passed validation").
  const auto scratch = ktune::test::scratch_dir("cli-all-failed");
  CHECK(run_bad(neg + "--budget 2 --timeout 0.001 --cache " + (scratch / "c.json").string() + " --log " +
                    (scratch / "s.log").string(),
                &err) == 1);
  CHECK_THAT(err, Catch::Contains("ktune: no config ran to the end for prim_neg on f32;n=64 (") &&
                      Catch::Contains("timeout (timeout: no result within 0.001 s"));
  CHECK_FALSE(std::filesystem::exists(scratch / "c.json"));
  // Its report: the failures, no empty table of the fastest or of results, and no cache said to be kept.
  std::string out;
  CHECK(run_command(ktune_exe().string() + " " + neg + "--budget 2 --timeout 0.001 --cache " +
                        (scratch / "c.json").string() + " --log " + (scratch / "again.log").string(),
                    &out) == 1);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("the configs that failed, by kind") &&
                      Catch::Contains("no winner: nothing written to "));
  CHECK_THAT(out, !Catch::Contains("fastest 0 of") && !Catch::Contains("| family ") &&
                      !Catch::Contains("left as it was") && !Catch::Contains("best inf"));
  // Its log lists the configs that failed, by kind: how many, the first and why.
  std::string shown;
  REQUIRE(run_command(ktune_exe().string() + " log show " + (scratch / "s.log").string(), &shown) == 0);
  CHECK_THAT(shown, Catch::Contains("the configs that failed, by kind:\n| failed | first config "));
  CHECK_THAT(shown, Catch::Contains("| timeout: no result within 0.001 s"));
  REQUIRE(run_command(ktune_exe().string() + " --json log show " + (scratch / "s.log").string(), &shown) == 0);
  const auto kinds = nlohmann::json::parse(shown).at("failure_kinds");
  REQUIRE(kinds.size() == 1);
  CHECK(kinds[0].at("kind") == "timeout");
  CHECK(kinds[0].at("count") == nlohmann::json::parse(shown).at("evaluations"));  // every one timed out
  CHECK_THAT(kinds[0].at("first_reason").get<std::string>(), Catch::StartsWith("timeout: no result within 0.001 s"));
  // A minus sign is no count (it was read as 2^64 - 5, a shard count of 2^64 - 2).
  for (const std::string bad : {"--budget plateau:-5+3", "--shard 1/-2", "--shard 0/-1", "--shard /2"}) {
    INFO(bad);
    CHECK(run_bad("tune --backend emu --family prim_neg --problem '{\"dtype\":\"f32\",\"dims\":{\"n\":64}}' " + bad,
                  &err) == 2);
    CHECK_THAT(err, Catch::Contains(bad.find("budget") != std::string::npos ? "bad budget 'plateau:-5'"
                                                                           : "--shard must be i/n with 0 <= i < n"));
  }
  const auto dir = ktune::test::scratch_dir("cli-not-a-log");
  std::ofstream(dir / "notes.txt") << "7\n{\"config\": 1}\n";
  CHECK(run_bad("log show " + (dir / "notes.txt").string(), &err) == 2);
  CHECK_THAT(err, Catch::Contains("is not a ktune session log (its first line is no session header)"));
}

TEST_CASE("CLI: tune --json whose one session finds no winner prints no JSON, as other errors do", "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-json-no-winner");
  const std::string tune = ktune_exe().string() + " --json tune --backend emu --family prim_neg --problem "
                           "'{\"dtype\":\"f32\",\"dims\":{\"n\":64}}' --budget 2 --timeout 0.001 --cache " +
                           (dir / "c.json").string() + " --log ";
  // stdout alone: it held an empty array where the session's object goes.
  std::string out;
  CHECK(run_command("{ " + tune + (dir / "s.log").string() + " 2>/dev/null; }", &out) == 1);
  CHECK(out.empty());
  // The error on stderr says why.
  std::string err;
  CHECK(run_command("{ " + tune + (dir / "again.log").string() + " >/dev/null; }", &err) == 1);
  CHECK_THAT(err, Catch::EndsWith("ktune: no config ran to the end for prim_neg on f32;n=64 (1 timeout (timeout: no "
                                  "result within 0.001 s; worker killed and restarted))\n"));
}

TEST_CASE("CLI: an emulation compile killed before it cleaned up leaves nothing once ktune runs again", "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-emu-orphans");
  std::filesystem::create_directories(dir / "emu");
  // A process id no process has (past the kernel's pid_max), and this test's own, which is alive.
  const auto orphan = dir / "emu" / "tmp-0123abcd-99999999-0.cpp";
  const auto live = dir / "emu" / ("tmp-0123abcd-" + std::to_string(::getpid()) + "-0.cpp");
  std::ofstream(orphan) << "// cut short";
  std::ofstream(live) << "// being written";
  std::string out;
  REQUIRE(run_command("{ KTUNE_CACHE_DIR=" + dir.string() + " " + ktune_exe().string() +
                          " run --backend emu --family prim_neg >/dev/null 2>&1; }",
                      &out) == 0);
  CHECK_FALSE(std::filesystem::exists(orphan));
  CHECK(std::filesystem::exists(live));
}

TEST_CASE("CLI: an emulation compile whose files another process removed is compiled again, not failed", "[cli]") {
  namespace fs = std::filesystem;
  const auto dir = ktune::test::scratch_dir("cli-emu-cleaned");
  // A host compiler whose first compile of an object finds the objects' folder emptied under it, as `ktune cache
  // clean` or a cron job does to a running tune (the precompiled prelude, made before it, goes too).
  const auto cxx = dir / "cxx";
  std::ofstream(cxx) << "#!/bin/sh\n"
                        "case \"$1\" in --version) exec c++ --version;; esac\n"
                        "case \"$*\" in *c++-header*) exec c++ \"$@\";; esac\n"
                        "[ -e " << (dir / "once").string() << " ] || { touch " << (dir / "once").string()
                     << "; rm -rf " << (dir / "cache" / "emu").string() << "; }\n"
                        "exec c++ \"$@\"\n";
  fs::permissions(cxx, fs::perms::owner_all);
  std::string out;
  CHECK(run_command("KTUNE_HOST_CXX=" + cxx.string() + " KTUNE_CACHE_DIR=" + (dir / "cache").string() + " " +
                        ktune_exe().string() + " run --backend emu --family prim_neg",
                    &out) == 0);
  CHECK_THAT(out, Catch::Contains("PASS") && !Catch::Contains("host compiler failed"));
  CHECK(fs::exists(dir / "once"));
}

TEST_CASE("CLI: emulation objects are compiled against the prelude precompiled once", "[cli]") {
  namespace fs = std::filesystem;
  const auto dir = ktune::test::scratch_dir("cli-emu-prelude");
  // A host compiler that says which headers each compile reads (-H: "! name.gch" for a precompiled one).
  const auto cxx = dir / "cxx";
  std::ofstream(cxx) << "#!/bin/sh\n"
                        "case \"$1\" in --version) exec c++ --version;; esac\n"
                        "case \"$*\" in *c++-header*) echo header >> " << (dir / "headers").string() << ";; esac\n"
                        "exec c++ -H \"$@\" 2>> " << (dir / "read").string() << "\n";
  fs::permissions(cxx, fs::perms::owner_all);
  const std::string run = "KTUNE_HOST_CXX=" + cxx.string() + " KTUNE_CACHE_DIR=" + (dir / "cache").string() + " " +
                          ktune_exe().string() + " run --backend emu --family ";
  std::string out;
  CHECK(run_command(run + "prim_neg", &out) == 0);
  CHECK_THAT(out, Catch::Contains("PASS"));
  CHECK(run_command(run + "prim_exp", &out) == 0);  // another process: the same precompiled prelude
  CHECK_THAT(out, Catch::Contains("PASS"));
  std::vector<std::string> precompiled;
  std::size_t objects = 0;
  for (const auto& entry : fs::directory_iterator(dir / "cache" / "emu")) {
    if (entry.path().extension() == ".gch") precompiled.push_back(entry.path().string());
    objects += entry.path().extension() == ".so";
  }
  REQUIRE(precompiled.size() == 1);
  CHECK(ktune::read_file(dir / "headers") == "header\n");
  // Each object's compile read it, not the prelude's text.
  const std::string read = ktune::read_file(dir / "read");
  std::size_t used = 0;
  for (std::size_t at = read.find("! " + precompiled[0] + "\n"); at != std::string::npos;
       at = read.find("! " + precompiled[0] + "\n", at + 1))
    ++used;
  CHECK(objects >= 2);
  CHECK(used == objects);
}

TEST_CASE("CLI: emulation objects are not loaded from a cache folder other users may write to", "[cli]") {
  namespace fs = std::filesystem;
  const auto dir = ktune::test::scratch_dir("cli-emu-shared");
  const std::string run = " " + ktune_exe().string() + " run --backend emu --family prim_neg";
  std::string err;
  REQUIRE(run_command("{ KTUNE_CACHE_DIR=" + dir.string() + run + " >/dev/null; }", &err) == 0);
  // Anyone could put an object there, whose constructors dlopen runs: refused before any is loaded.
  fs::permissions(dir / "emu", fs::perms::others_write, fs::perm_options::add);
  CHECK(run_command("{ KTUNE_CACHE_DIR=" + dir.string() + run + " >/dev/null; }", &err) == 2);
  CHECK_THAT(err, Catch::StartsWith("ktune: emulation objects are not loaded from " + (dir / "emu").string() +
                                    ": every user may write to the folder") &&
                      Catch::Contains("chmod o-w"));
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  fs::permissions(dir / "emu", fs::perms::others_write, fs::perm_options::remove);
  for (const auto& entry : fs::directory_iterator(dir / "emu"))
    if (entry.path().extension() == ".so")
      fs::permissions(entry.path(), fs::perms::others_write, fs::perm_options::add);
  CHECK(run_command("{ KTUNE_CACHE_DIR=" + dir.string() + run + " >/dev/null; }", &err) == 2);
  CHECK_THAT(err, Catch::Contains("every user may write to the object"));

  // Without HOME: this user's own folder in TMPDIR, private; one other users may write to is refused.
  const std::string no_home = "env -u HOME -u XDG_CACHE_HOME -u KTUNE_CACHE_DIR TMPDIR=";
  const auto mine = "ktune-cache-" + std::to_string(::geteuid());
  fs::create_directory(dir / "tmp");
  REQUIRE(run_command("{ " + no_home + (dir / "tmp").string() + run + " >/dev/null; }", &err) == 0);
  CHECK((fs::status(dir / "tmp" / mine).permissions() & fs::perms::all) == fs::perms::owner_all);
  CHECK(fs::exists(dir / "tmp" / mine / "emu"));
  fs::create_directory(dir / "shared");
  fs::create_directory(dir / "shared" / mine);
  fs::permissions(dir / "shared" / mine, fs::perms::all);
  CHECK(run_command("{ " + no_home + (dir / "shared").string() + run + " >/dev/null; }", &err) == 2);
  CHECK(err == "ktune: the cache folder " + (dir / "shared" / mine).string() +
                   " (used without HOME or XDG_CACHE_HOME) may be written by other users (mode 777): ktune loads code "
                   "from its cache and will not use it; remove it, or set KTUNE_CACHE_DIR to a folder of your own\n");
  CHECK(fs::is_empty(dir / "shared" / mine));
}

TEST_CASE("CLI: outputs named as long as a name may be are written, a longer name refused before the run", "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-long-names");
  // 255 bytes each: their lock and temp files' names are fitted beside them.
  const auto save = dir / (std::string(243, 'w') + ".safetensors");
  const auto checkpoint = dir / (std::string(250, 'c') + ".ckpt"), metrics = dir / (std::string(249, 'm') + ".jsonl");
  const std::string train = "train --model tiny --ctx 8 --batch 2 --steps 2 ";
  std::string err;
  REQUIRE(run_bad(train + "--save " + save.string() + " --checkpoint " + checkpoint.string() + " --metrics " +
                      metrics.string(),
                  &err) == 0);
  CHECK(std::filesystem::exists(save));
  CHECK(std::filesystem::exists(checkpoint));
  CHECK(std::filesystem::exists(metrics));
  CHECK(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()) == 3);
  // A name the file system refuses (a byte longer) would lose the run at its end: refused at its start.
  const auto longer = dir / (std::string(244, 'w') + ".safetensors");
  CHECK(run_bad(train + "--save " + longer.string(), &err) == 2);
  CHECK(err == "ktune: cannot write --save " + longer.string() +
                   ": a name in it is 256 bytes long, and the file system takes 255 at most; give a writable file "
                   "path\n");
  CHECK(run_bad("tune --backend emu --family prim_neg --problem '{\"dtype\":\"f32\",\"dims\":{\"n\":64}}' --cache " +
                    (dir / (std::string(251, 'a') + ".json")).string(),
                &err) == 2);
  CHECK_THAT(err, Catch::Contains("a name in it is 256 bytes long"));
}

TEST_CASE("CLI: a write past the file-size limit fails with one line naming what still holds the run", "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-file-size");
  const auto weights = dir / "big.st";
  std::string err;
  // prlimit: a file-size limit in bytes; the tiny model's weights are about 0.5 MB.
  CHECK(run_command("{ prlimit --fsize=65536 " + ktune_exe().string() + " train --model tiny --steps 1 --save " +
                        weights.string() + " >/dev/null; }",
                    &err) == 1);
  CHECK(err == "ktune: cannot write " + weights.string() + ": File too large: the run stopped after step 1\n");
  CHECK(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()) == 0);
  // A checkpoint (its weights and AdamW's two moments, about 1.5 MB) past the limit, the weights alone (about
  // 0.5 MB) within it: --save keeps the step.
  const auto ckpt = dir / "c.ckpt";
  CHECK(run_command("{ prlimit --fsize=1000000 " + ktune_exe().string() +
                        " train --model tiny --steps 2 --checkpoint " + ckpt.string() + " --save " + weights.string() +
                        " >/dev/null; }",
                    &err) == 1);
  CHECK(err == "ktune: cannot write " + ckpt.string() + ": File too large: the run stopped after step 2; " +
                   weights.string() + " holds the weights of step 2\n");
  CHECK_FALSE(std::filesystem::exists(ckpt));
  std::string out;
  CHECK(run_command(ktune_exe().string() + " eval --model tiny --weights " + weights.string(), &out) == 0);
  // A tuning session's log past the limit: the line says what --resume goes on from.
  const auto log = dir / "s.log";
  CHECK(run_command("{ prlimit --fsize=200 " + ktune_exe().string() +
                        " tune --backend emu --family prim_neg --problem '{\"dtype\":\"f32\",\"dims\":{\"n\":64}}' "
                        "--budget 2 --cache " + (dir / "c.json").string() + " --log " + log.string() + " >/dev/null; }",
                    &err) == 1);
  CHECK_THAT(err, Catch::StartsWith("ktune: cannot write session log " + log.string() + ": File too large; ") &&
                      Catch::EndsWith(log.string() + " holds the evaluations before it: the same command with --resume "
                                                     "goes on from them\n"));
}

TEST_CASE("CLI: a step whose checkpoint could not be written is not recorded as checkpointed", "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-checkpoint-failed");
  const auto ckpt = dir / "c.ckpt", metrics = dir / "m.jsonl";
  // The checkpoint (about 1.5 MB) past the file-size limit, the metrics lines well within it.
  std::string err;
  CHECK(run_command("{ prlimit --fsize=1000000 " + ktune_exe().string() + " train --model tiny --steps 2 --json " +
                        "--checkpoint " + ckpt.string() + " --metrics " + metrics.string() + " > " +
                        (dir / "out.json").string() + "; }",
                    &err) == 1);
  CHECK_THAT(err, Catch::StartsWith("ktune: cannot write " + ckpt.string() + ": File too large"));
  std::vector<nlohmann::json> lines;
  std::istringstream in(read_all(metrics));
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  REQUIRE(lines.size() == 2);
  CHECK(lines[1]["step"] == 2);
  CHECK(lines[1]["checkpointed"] == false);  // due after step 2, the last; its write failed
  const auto json = nlohmann::json::parse(read_all(dir / "out.json"));
  REQUIRE(json["steps"].size() == 2);
  CHECK(json["steps"][1]["checkpointed"] == false);
  CHECK_FALSE(std::filesystem::exists(ckpt));
}

TEST_CASE("CLI: train whose --metrics cannot be written stops at that step with its checkpoint and says so", "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-metrics-full");
  const auto ckpt = dir / "c.ckpt", metrics = dir / "m.jsonl";
  // A model whose checkpoint (about 75 KB) fits under the file-size limit (100 KB) that its metrics outgrow.
  const std::string train = ktune_exe().string() +
                            " train --d-model 8 --heads 1 --layers 1 --vocab 32 --ctx 4 --batch 1 --threads 1 "
                            "--checkpoint " +
                            ckpt.string() + " --metrics " + metrics.string() + " --resume ";
  std::string err;
  CHECK(run_command("{ prlimit --fsize=100000 " + train + "--steps 5000 >/dev/null; }", &err) == 1);
  INFO(err);
  const auto words = err.find("; the run stopped after step ");
  REQUIRE(words != std::string::npos);
  CHECK_THAT(err, Catch::StartsWith("ktune: cannot write --metrics " + metrics.string() + ": File too large"));
  CHECK_THAT(err, Catch::EndsWith("; the checkpoint " + ckpt.string() +
                                  " holds it: run again with --resume, once the metrics can be written, to go on\n"));
  const std::int64_t stopped = std::stoll(err.substr(words + std::string("; the run stopped after step ").size()));
  CHECK(stopped > 100);
  CHECK(stopped < 5000);
  // The run goes on from there, its metrics' cut line dropped: every line a record, the steps in order, none
  // missing but the one whose line could not be written.
  REQUIRE(run_command(train + "--steps " + std::to_string(stopped + 2) + " >/dev/null", &err) == 0);
  std::ifstream in(metrics);
  std::vector<std::int64_t> steps;
  for (std::string line; std::getline(in, line);) steps.push_back(nlohmann::json::parse(line).at("step"));
  REQUIRE(steps.size() >= static_cast<std::size_t>(stopped + 1));
  CHECK(std::adjacent_find(steps.begin(), steps.end(), std::greater_equal<>()) == steps.end());
  CHECK(steps.front() == 1);
  CHECK(steps.back() == stopped + 2);
}

TEST_CASE("CLI: output that does not reach stdout fails the command with one line", "[cli]") {
  if (!std::filesystem::exists("/dev/full")) {
    WARN("no /dev/full here; skipping");
    return;
  }
  std::string err;
  for (const char* args : {"families", "render --family rmsnorm_fwd", "--json families"}) {
    INFO(args);
    CHECK(run_command("{ " + ktune_exe().string() + " " + args + " >/dev/full; }", &err) == 1);
    CHECK(err == "ktune: cannot write standard output: No space left on device\n");
  }
}

TEST_CASE("CLI: notes on what the weights say wait for the run to start, so a refusal on the way is one line",
          "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-notes-wait");
  const std::string weights = (dir / "w.safetensors").string();
  std::string out;
  REQUIRE(run_command(ktune_exe().string() + " train --model tiny --layers 1 --ctx 16 --batch 2 --threads 2 --steps 1 "
                                             "--seed 5 --save " + weights,
                      &out) == 0);
  {
    const ktune::test::ScopedEnv no_device("KTUNE_NO_DEVICE", "1");  // a refusal on the way, on a GPU machine too
    CHECK(run_bad("generate --prompt 1 --weights " + weights + " --backend cuda", &out) == 2);
    CHECK_THAT(out, Catch::Contains("no CUDA device"));
    CHECK(run_bad("eval --weights " + weights + " --backend cuda", &out) == 2);
    CHECK(run_bad("train --weights " + weights + " --backend cuda --steps 1", &out) == 2);
  }
  CHECK(run_bad("generate --prompt 99999999 --weights " + weights, &out) == 2);
  CHECK_THAT(out, Catch::Contains("outside the vocabulary"));
  // Sizes that make no model are the file's, and said so.
  ktune::TensorFile file = ktune::read_safetensors(weights);
  file.metadata["num_heads"] = "3";
  const std::string odd = (dir / "odd.safetensors").string();
  ktune::write_safetensors(odd, file);
  CHECK(run_bad("eval --weights " + odd, &out) == 2);
  CHECK_THAT(out, Catch::Contains("the metadata of " + odd + " gives sizes that make no model: heads (3) must divide "
                                  "d_model (64)"));
  // A run that starts says them.
  REQUIRE(run_command(ktune_exe().string() + " eval --weights " + weights + " --batch 2 --threads 2", &out) == 0);
  CHECK_THAT(out, Catch::Contains("--ctx 16 from the metadata of " + weights) &&
                      Catch::Contains("note: --seed 5 from the metadata of " + weights));
}

TEST_CASE("CLI: a cache merged into itself, replay --runs past its range, an empty --shard, a model list without "
          "--sweep, a list naming an item twice, an empty cache to export and an empty filter are refused, saying what is "
          "accepted",
          "[cli]") {
  const auto dir = ktune::test::scratch_dir("cli-refusals-more");
  const std::string cache = (dir / "c.json").string();
  std::string err;
  CHECK(run_bad("cache merge --into " + cache + " " + cache, &err) == 2);
  CHECK_THAT(err, Catch::Contains("is the --into file itself"));
  CHECK(run_bad("cache merge --into " + cache + " " + (dir / "." / "c.json").string(), &err) == 2);
  CHECK_FALSE(std::filesystem::exists(cache));
  CHECK(run_bad("replay --dataset " + ktune_exe().string() + " --runs 2147483648", &err) == 2);
  CHECK_THAT(err, Catch::Contains("1..1000000"));
  CHECK(run_bad("tune --backend emu --no-isolate --family swiglu_fwd --problem '{\"dtype\":\"f32\",\"dims\":{\"n\":64}}' "
                "--budget 2 --shard '' --cache " + cache,
                &err) == 2);
  CHECK_THAT(err, Catch::Contains("--shard must be i/n"));
  CHECK_FALSE(std::filesystem::exists(cache));
  CHECK(run_bad("bench e2e --backend emu --model tiny,small", &err) == 2);
  CHECK_THAT(err, Catch::Contains("give --sweep"));
  // A list that names an item twice would measure it twice.
  CHECK(run_bad("compile --family swiglu_fwd --family swiglu_fwd --arch sm_80", &err) == 2);
  CHECK_THAT(err, Catch::Contains("--family names swiglu_fwd twice"));
  CHECK(run_bad("bench ops --backend emu --ctx 16,16", &err) == 2);
  CHECK_THAT(err, Catch::Contains("--ctx names 16 twice"));
  CHECK(run_bad("bench adam --backend emu --tensors 1,1", &err) == 2);
  std::ofstream(cache) << ktune::cache::serialise_cache({});
  CHECK(run_bad("cache export " + cache, &err) == 2);
  CHECK_THAT(err, Catch::Contains("holds no entries"));
  // An empty filter is no filter left out.
  CHECK(run_bad("cache show " + cache + " --family ''", &err) == 2);
  CHECK_THAT(err, Catch::Contains("--family: an empty value"));
  CHECK(run_bad("cache prune " + cache + " --nvrtc ''", &err) == 2);
}

TEST_CASE("CLI: a problem whose buffers alone pass the host's memory is refused before anything is allocated",
          "[cli]") {
  std::string err;
  // 1000 tensors of 10^9 fp32 elements: parameters, gradients and two moments, 16 TB.
  CHECK(run_bad("run --backend emu --family adamw --problem "
                "'{\"dtype\":\"f32\",\"dims\":{\"numel\":1000000000,\"tensors\":1000}}'",
                &err) == 2);
  CHECK_THAT(err, Catch::Contains("too large to check on this host"));
}

}  // namespace cli_input_checks_test
