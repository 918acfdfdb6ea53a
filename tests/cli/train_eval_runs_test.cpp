// `ktune train` and `ktune eval` over one run's files: eval of its weights
// reads the batches its validation read, a damaged checkpoint given as
// --weights is refused, a stop's step is recorded as checkpointed where it
// was, and a resume's note on its shape says what differs.
#include <catch2/catch.hpp>
#include <cstring>
#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "base/files.hpp"
#include "base/safetensors.hpp"
#include "model/checkpoint.hpp"
#include "model/config.hpp"
#include "support.hpp"

namespace cli_train_eval_runs_test {

using ktune::test::ktune_exe;
using ktune::test::run_command;

namespace {

int run_ktune(const std::string& args, std::string* out) { return run_command(ktune_exe().string() + " " + args, out); }

std::vector<nlohmann::json> metrics_lines(const std::filesystem::path& path) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(ktune::read_file(path));
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

std::filesystem::path corpus(const std::filesystem::path& dir) {
  std::vector<std::uint16_t> ids(2000);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::uint16_t>((i * 37 + i / 7) % 128);
  return ktune::test::write_tokens(dir / "t.u16", ids);
}

}  // namespace

TEST_CASE("CLI: eval --val-split of a run's weights, without --seed, gives the run's last validation loss at the "
          "seed the weights record, and says so",
          "[cli]") {
  const auto dir = ktune::test::scratch_dir("eval_val_split_seed");
  const std::string tokens = corpus(dir).string(), weights = (dir / "s5.st").string();
  std::string out;
  REQUIRE(run_ktune("train --model tiny --threads 2 --seed 5 --steps 20 --tokens " + tokens +
                        " --val-split 0.1 --eval-every 10 --save " + weights + " --metrics " +
                        (dir / "m.jsonl").string(),
                    &out) == 0);
  const double last_val = metrics_lines(dir / "m.jsonl").back().at("val_loss").get<double>();
  const std::string eval = "eval --threads 2 --weights " + weights + " --tokens " + tokens +
                           " --val-split 0.1 --batches 4";
  REQUIRE(run_ktune("--json " + eval, &out) == 0);
  const auto j = nlohmann::json::parse(out.substr(out.find('{')));  // after the note
  CHECK(j.at("seed") == 5);
  CHECK(j.at("loss").get<double>() == Approx(last_val).epsilon(1e-12));
  REQUIRE(run_ktune(eval, &out) == 0);
  CHECK_THAT(out, Catch::Contains("note: --seed 5 from the metadata of " + weights +
                                  " (the seed of its run, whose validation read these batches)") &&
                      Catch::Contains(tokens + " held out by --val-split, drawn at seed 5)"));
  // A --seed given is the seed used, and says nothing.
  REQUIRE(run_ktune("--json " + eval + " --seed 0", &out) == 0);
  CHECK_THAT(out, !Catch::Contains("note: --seed"));
  CHECK(nlohmann::json::parse(out.substr(out.find('{'))).at("seed") == 0);
}

TEST_CASE("CLI: a damaged checkpoint given as --weights to eval, generate or train is refused in one line, exit 2",
          "[cli]") {
  const auto dir = ktune::test::scratch_dir("damaged_weights");
  const std::string ckpt = (dir / "run.ckpt").string(), damaged = (dir / "flip.ckpt").string();
  std::string out;
  REQUIRE(run_ktune("train --model tiny --threads 2 --steps 2 --ctx 16 --checkpoint " + ckpt, &out) == 0);
  ktune::TensorFile file = ktune::read_safetensors(ckpt);
  std::string& bytes = file.tensors.at("lm_head.weight").bytes;
  for (std::size_t i = 0; i + 4 <= bytes.size(); i += 4) {
    float v = 0;
    std::memcpy(&v, bytes.data() + i, 4);
    v *= 1000;
    std::memcpy(bytes.data() + i, &v, 4);
  }
  ktune::write_safetensors(damaged, file);
  const std::string line = "ktune: " + damaged + " is damaged: its tensors are not the bytes it was written with (a "
                           "disk or a copy changed them); use an earlier checkpoint, or the --save file of the run\n";
  for (const std::string& command :
       {"eval --threads 2 --weights " + damaged, "generate --threads 2 --prompt 1 2 --weights " + damaged,
        "train --model tiny --threads 2 --steps 1 --ctx 16 --weights " + damaged + " --save " +
            (dir / "w.st").string()}) {
    INFO(command);
    CHECK(run_ktune(command, &out) == 2);
    CHECK_THAT(out, Catch::EndsWith(line));
    CHECK(ktune::test::occurrences(out, "\n") == 1);
  }
  CHECK(!std::filesystem::exists(dir / "w.st"));
  // Resumed from, it is refused before the run says anything (its "training ...", "resuming from ..." lines).
  std::filesystem::copy_file(damaged, dir / "resume.ckpt");
  CHECK(run_ktune("train --model tiny --threads 2 --steps 3 --ctx 16 --resume --checkpoint " +
                      (dir / "resume.ckpt").string(),
                  &out) == 2);
  CHECK_THAT(out, Catch::Contains("resume.ckpt is damaged: its tensors are not the bytes it was written with"));
  CHECK(ktune::test::occurrences(out, "\n") == 1);
  REQUIRE(run_ktune("eval --threads 2 --weights " + ckpt, &out) == 0);
}

TEST_CASE("CLI: a stop that comes while a step's line goes out ends the run at that step, and its --metrics line "
          "and stdout say it was checkpointed",
          "[cli][checkpoint]") {
  const auto dir = ktune::test::scratch_dir("stop_while_emitting");
  const auto metrics = dir / "m.jsonl", ckpt = dir / "run.ckpt";
  // stdout is a pipe nobody reads until the signal: the run blocks writing a step's line once the pipe is full,
  // after that step's --metrics line is written, and the signal comes then.
  const std::string lines = "n=$(wc -l < " + metrics.string() + " 2>/dev/null || echo 0); sleep 0.5; [ \"$n\" -ge 3 ] "
                            "&& [ \"$(wc -l < " + metrics.string() + ")\" = \"$n\" ]";
  std::string out;
  REQUIRE(run_command("(" + ktune_exe().string() + " train --model tiny --threads 1 --ctx 8 --batch 1 --steps 100000 " +
                          "--checkpoint " + ckpt.string() + " --metrics " + metrics.string() + " 2> " +
                          (dir / "err").string() + " & echo $! > " + (dir / "pid").string() + "; wait $!; echo $? > " +
                          (dir / "code").string() + ") | (until [ -s " + (dir / "pid").string() +
                          " ]; do sleep 0.05; done; pid=$(cat " + (dir / "pid").string() + "); " +
                          ktune::test::wait_while_running(lines) + "kill -TERM $pid; cat > " + (dir / "out").string() +
                          ")",
                      &out) == 0);
  CHECK(ktune::read_file(dir / "code") == "143\n");
  CHECK_THAT(ktune::read_file(dir / "err"), Catch::Contains("stopped by SIGTERM after step"));
  const std::int64_t held = ktune::model::read_checkpoint_info(ckpt, ktune::model::model_config("tiny")).step;
  const auto records = metrics_lines(metrics);
  REQUIRE(!records.empty());
  CHECK(records.back().at("step") == held);
  CHECK(records.back().at("checkpointed") == true);
  CHECK(static_cast<std::int64_t>(records.size()) == held);
  for (std::size_t i = 0; i + 1 < records.size(); ++i) CHECK(records[i].at("checkpointed") == false);
  // The step's line, or a line after it, names the checkpoint.
  std::istringstream printed(ktune::read_file(dir / "out"));
  bool said = false;
  for (std::string line; std::getline(printed, line);)
    said = said || (line.rfind(fmt::format("step {:>6}/100000  ", held), 0) == 0 &&
                    line.find("  checkpoint " + ckpt.string()) != std::string::npos);
  CHECK(said);
}

TEST_CASE("CLI: a resume that splits a step's windows into other micro-batches is told its batches are the run's",
          "[cli][checkpoint]") {
  const auto dir = ktune::test::scratch_dir("resume_micro_batches");
  const std::string run = "train --model tiny --threads 2 --ctx 8 --resume --checkpoint " + (dir / "run.ckpt").string();
  std::string out;
  REQUIRE(run_ktune(run + " --batch 4 --steps 1", &out) == 0);
  REQUIRE(run_ktune(run + " --batch 2 --accumulate 2 --steps 2", &out) == 0);
  CHECK_THAT(out, !Catch::Contains("its batches are not those") &&
                      Catch::Contains("this run goes on at ctx 8, batch 2 x 2 micro-batches: its steps draw the "
                                      "windows the run would have drawn"));
  REQUIRE(run_ktune(run + " --batch 2 --steps 3", &out) == 0);
  CHECK_THAT(out, Catch::Contains("this run goes on at ctx 8, batch 2, so its batches are not those the run would "
                                  "have drawn"));
}

}  // namespace cli_train_eval_runs_test
