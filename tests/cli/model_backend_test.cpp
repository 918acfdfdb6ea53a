// `ktune train | eval | bench e2e --backend`: the device backends' refusals,
// each one line and exit 2, before any work; --graph, --pdl and
// --deterministic where they apply.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "base/files.hpp"
#include "model/memory_plan.hpp"
#include "support.hpp"

namespace cli_model_backend_test {

using ktune::test::ktune_exe;
using ktune::test::run_command;

namespace {

// Exit code and the output of `ktune args` (stdout dropped) without a device.
int run_without_device(const std::string& args, std::string* err) {
  return run_command("{ KTUNE_NO_DEVICE=1 " + ktune_exe().string() + " " + args + " >/dev/null; }", err);
}

}  // namespace

TEST_CASE("CLI: model commands with --backend cuda and no GPU say so in one line and exit 2", "[cli][model]") {
  for (const char* args : {"train --model tiny --steps 1 --backend cuda", "eval --model tiny --backend cuda",
                           "generate --model tiny --prompt 1 2 --backend cuda",
                           "bench e2e --model tiny --ctx 8 --trials 1 --backend cuda --mode eager",
                           "bench e2e --model tiny --sweep --backend cuda"}) {
    INFO(args);
    std::string out;
    CHECK(run_without_device(args, &out) == 2);
    CHECK(out.find('\n') + 1 == out.size());
    CHECK_THAT(out, Catch::Contains("KTUNE_NO_DEVICE"));
  }
}

TEST_CASE("CLI: model commands refuse unknown backends and modes, and a cache without compiled mode", "[cli][model]") {
  std::string out;
  CHECK(run_without_device("train --model tiny --steps 1 --backend tpu", &out) == 2);
  CHECK_THAT(out, Catch::Contains("--backend") && Catch::Contains("cpu"));
  CHECK(run_without_device("eval --model tiny --backend emu --mode fast", &out) == 2);
  CHECK_THAT(out, Catch::Contains("--mode"));
  const std::string cache = (ktune::test::scratch_dir("model_backend") / "tuned.json").string();
  CHECK(run_command("echo '{}' > " + cache, &out) == 0);
  CHECK(run_without_device("eval --model tiny --cache " + cache, &out) == 2);
  CHECK_THAT(out, Catch::Contains("the cpu backend and eager mode take no tuned cache"));
  CHECK(run_without_device("eval --model tiny --backend emu --mode eager --cache " + cache, &out) == 2);
  // A cache not there yet is refused where nothing writes it (on cuda, compiled mode writes its GEMM choices into
  // it: tests/cli/input_checks_test.cpp); a folder is no cache.
  const auto fresh = ktune::test::scratch_dir("model_backend") / "fresh.json";
  CHECK(run_without_device("bench e2e --model tiny --ctx 8 --batch 1 --trials 1 --warmup 0 --backend emu --cache " +
                               fresh.string(),
                           &out) == 2);
  CHECK_THAT(out, Catch::Contains("does not exist"));
  CHECK(run_without_device("eval --model tiny --backend emu --cache " + fresh.parent_path().string(), &out) == 2);
}

TEST_CASE("CLI: --graph takes compiled mode on a device backend, and a graphed run's summary names its graphs",
          "[cli][model]") {
  std::string out;
  for (const char* args : {"bench e2e --model tiny --ctx 8 --trials 1 --graph",
                           "train --model tiny --steps 1 --backend emu --mode eager --graph"}) {
    INFO(args);
    CHECK(run_without_device(args, &out) == 2);
    CHECK(out.find('\n') + 1 == out.size());
    CHECK_THAT(out, Catch::Contains("--graph replays compiled mode's launches"));
  }
  CHECK(run_command("KTUNE_NO_DEVICE=1 " + ktune_exe().string() +
                        " bench e2e --model tiny --ctx 8 --batch 1 --trials 2 --warmup 0 --backend emu --graph",
                    &out) == 0);
  CHECK_THAT(out, Catch::Contains("graphs of") && Catch::Contains("(forward)"));
  // Said before the first step, what will be captured; at the end, what was: the graphs' nodes, or none where no
  // pass ran twice. Eval runs the forward alone.
  const std::string ktune = "KTUNE_NO_DEVICE=1 " + ktune_exe().string();
  CHECK(run_command(ktune + " train --model tiny --ctx 8 --batch 1 --steps 1 --backend emu --graph", &out) == 0);
  CHECK_THAT(out, Catch::Contains("; forward and backward captured as graphs on their second run") &&
                      Catch::Contains("(compiled mode; no graph captured: no pass ran twice)"));
  // A validation's forwards capture the forward where the one step's backward ran once.
  CHECK(run_command(ktune + " train --model tiny --ctx 8 --batch 1 --steps 1 --eval-every 1 --backend emu --graph",
                    &out) == 0);
  CHECK_THAT(out, Catch::Matches("[\\s\\S]*\\(compiled mode; the forward a graph of [1-9][0-9]* nodes, "
                                 "the backward not captured: it ran once\\)\n[\\s\\S]*"));
  CHECK(run_command(ktune + " train --model tiny --ctx 8 --batch 1 --steps 3 --backend emu --graph", &out) == 0);
  CHECK_THAT(out, Catch::Matches("[\\s\\S]*\\(compiled mode; graphs of [1-9][0-9]* \\(forward\\) and "
                                 "[1-9][0-9]* \\(backward\\) nodes\\)\n[\\s\\S]*"));
  CHECK(run_command("{ " + ktune + " --json train --model tiny --ctx 8 --batch 1 --steps 3 --backend emu --graph "
                        "2>/dev/null; }",
                    &out) == 0);
  const auto j = nlohmann::json::parse(out);
  CHECK(j.at("graph_nodes").at("forward").get<int>() > 0);
  CHECK(j.at("graph_nodes").at("backward").get<int>() > j.at("graph_nodes").at("forward").get<int>());
  CHECK(run_command(ktune + " eval --model tiny --ctx 8 --batch 1 --backend emu --graph", &out) == 0);
  CHECK_THAT(out, Catch::Contains("; no graph captured: no pass ran twice") &&
                      !Catch::Contains("backward"));
  CHECK(run_command(ktune + " eval --model tiny --ctx 8 --batch 1 --batches 2 --backend emu --graph", &out) == 0);
  CHECK_THAT(out, Catch::Matches("[\\s\\S]*; the forward a graph of [1-9][0-9]* nodes\\n[\\s\\S]*") &&
                      !Catch::Contains("backward"));
}

TEST_CASE("CLI: --pdl takes a device backend, and the summary says where it has no effect", "[cli][model]") {
  std::string out;
  for (const char* args : {"bench e2e --model tiny --ctx 8 --trials 1 --pdl", "eval --model tiny --pdl"}) {
    INFO(args);
    CHECK(run_without_device(args, &out) == 2);
    CHECK(out.find('\n') + 1 == out.size());
    CHECK_THAT(out, Catch::Contains("--pdl launches a device backend's kernels"));
  }
  // The emulation runs each launch to its end: the run is the same, and its summary says so.
  CHECK(run_command("KTUNE_NO_DEVICE=1 " + ktune_exe().string() +
                        " --json bench e2e --model tiny --ctx 8 --batch 1 --trials 1 --warmup 0 --backend emu --pdl",
                    &out) == 0);
  CHECK_THAT(out, Catch::Contains("\"programmatic_launch\": true") &&
                      Catch::Contains("programmatic dependent launch asked for (no effect here"));
}

TEST_CASE("CLI: --deterministic: a device run's summary and report say so, a resume that changes it notes it",
          "[cli][model]") {
  std::string out;
  CHECK(run_command("KTUNE_NO_DEVICE=1 " + ktune_exe().string() +
                        " --json bench e2e --model tiny --ctx 8 --batch 1 --trials 1 --warmup 0 --backend emu "
                        "--deterministic",
                    &out) == 0);
  CHECK_THAT(out, Catch::Contains("\"deterministic\": true") && Catch::Contains("; deterministic"));
  const auto ckpt = ktune::test::scratch_dir("model_deterministic") / "run.ckpt";
  const std::string run =
      "train --model tiny --ctx 8 --batch 1 --backend emu --checkpoint " + ckpt.string() + " --resume";
  CHECK(run_command("KTUNE_NO_DEVICE=1 " + ktune_exe().string() + " " + run + " --steps 1 2>&1", &out) == 0);
  CHECK_THAT(out, !Catch::Contains("; deterministic"));
  // f32 compiled mode materialises attention: its backward's dS is in the plan the memory line gives.
  CHECK_THAT(out, Catch::Contains("AdamW state, activations, workspace, the ops' scratch)"));
  CHECK(run_command("KTUNE_NO_DEVICE=1 " + ktune_exe().string() + " " + run + " --steps 2 --deterministic 2>&1",
                    &out) == 0);
  CHECK_THAT(out, Catch::Contains("note: this run goes on with --deterministic on (was off): its steps are not those "
                                  "the run would have taken") &&
                      Catch::Contains("; deterministic"));
  // The cpu backend's runs repeat without it: taken, nothing changes.
  CHECK(run_command("KTUNE_NO_DEVICE=1 " + ktune_exe().string() + " train --model tiny --steps 1 --deterministic",
                    &out) == 0);
  CHECK_THAT(out, Catch::Contains("AdamW state, activations, workspace)"));  // the cpu backend's: no dS
}

TEST_CASE("CLI: bench e2e --recompute auto on a device backend plans the bytes its run holds, AdamW's state for "
          "a step only",
          "[cli][model]") {
  const auto dir = ktune::test::scratch_dir("model_e2e_recompute_auto");
  const std::string run = "bench e2e --model tiny --ctx 16 --batch 1 --trials 1 --warmup 0 --backend emu "
                          "--recompute auto --json-out " + (dir / "e2e.json").string();
  std::int64_t peaks[2] = {};
  for (const bool step : {false, true}) {
    INFO(step);
    std::string out;
    REQUIRE(run_command("KTUNE_NO_DEVICE=1 " + ktune_exe().string() + " " + run +
                            (step ? " --with-optimizer" : "") + " 2>&1",
                        &out) == 0);
    const auto report = nlohmann::json::parse(ktune::read_file(dir / "e2e.json"));
    peaks[step] = report.at("plan_peak_bytes").get<std::int64_t>();
    CHECK_THAT(out, Catch::Contains("recompute auto: none (" + ktune::model::format_bytes(peaks[step]) + " planned"));
  }
  CHECK(peaks[0] < peaks[1]);  // the moments
}

TEST_CASE("CLI: train --resume on another backend or dtype notes it, against the checkpoint's", "[cli][model]") {
  // Each computes other bits: the resumed steps are not those the run would have taken.
  std::string out;
  const auto ckpt = ktune::test::scratch_dir("model_resume_backend") / "run.ckpt";
  std::filesystem::remove(ckpt);
  const std::string run = "train --model tiny --ctx 8 --batch 1 --checkpoint " + ckpt.string() + " --resume";
  REQUIRE(run_without_device(run + " --steps 1", &out) == 0);
  REQUIRE(run_without_device(run + " --steps 2 --backend emu --dtype bf16", &out) == 0);
  CHECK_THAT(out, Catch::Contains("note: this run goes on with --backend emu (was cpu): its steps are not those the "
                                  "run would have taken"));
  REQUIRE(run_without_device(run + " --steps 3 --backend emu", &out) == 0);
  CHECK_THAT(out, Catch::Contains("note: this run goes on with --dtype f32 (was bf16): its steps are not those the "
                                  "run would have taken"));
  REQUIRE(run_without_device(run + " --steps 4 --backend emu", &out) == 0);
  CHECK_THAT(out, !Catch::Contains("note:"));
}

TEST_CASE("CLI: eval --dump --deterministic writes the same gradient norms whatever the order of the emulation's "
          "blocks",
          "[cli][model]") {
  // Eager mode's embedding backward adds by atomics without it: the blocks' order changes its last bits.
  const auto dir = ktune::test::scratch_dir("model_eval_deterministic");
  std::string dumps[2];
  const char* orders[2] = {"in-order", "reverse"};
  for (int i = 0; i < 2; ++i) {
    const auto dump = dir / (std::string(orders[i]) + ".json");
    std::string out;
    CHECK(run_command(std::string("KTUNE_NO_DEVICE=1 KTUNE_EMU_SCHEDULE=") + orders[i] + " " + ktune_exe().string() +
                          " eval --model tiny --backend emu --mode eager --threads 1 "
                          "--deterministic --dump " + dump.string() + " 2>&1",
                      &out) == 0);
    INFO(out);
    dumps[i] = ktune::read_file(dump);
  }
  CHECK_THAT(dumps[0], Catch::Contains("token_embeddings.weight"));
  CHECK(dumps[0] == dumps[1]);
}

TEST_CASE("CLI: --dtype takes f32, tf32 or bf16, and the cpu backend runs f32 only", "[cli][model]") {
  const std::string save = (ktune::test::scratch_dir("model_dtype") / "w.safetensors").string();
  for (const char* args : {"train --model tiny --steps 1 --dtype tf32", "eval --model tiny --dtype bf16",
                           "bench e2e --model tiny --ctx 8 --trials 1 --dtype tf32"}) {
    INFO(args);
    std::string out;
    CHECK(run_without_device(std::string(args) + (args[0] == 't' ? " --save " + save : ""), &out) == 2);
    CHECK(out.find('\n') + 1 == out.size());
    CHECK_THAT(out, Catch::Contains("the cpu backend runs f32 only") && Catch::Contains("--backend cuda or emu"));
  }
  CHECK_FALSE(std::filesystem::exists(save));
  std::string out;
  CHECK(run_without_device("eval --model tiny --backend emu --dtype f16", &out) == 2);
  CHECK_THAT(out, Catch::Contains("--dtype") && Catch::Contains("tf32"));
  // The device backends run bf16 mixed precision.
  CHECK(run_without_device("eval --model tiny --ctx 8 --batch 1 --backend emu --dtype bf16", &out) == 0);
  CHECK(out.empty());  // nothing on stderr
}

}  // namespace cli_model_backend_test
