// bench/plot.py on what ktune's benchmarks write, each run through the CLI
// on the emulation or the cpu backend: Adam, ops, e2e (one run, and a list of
// runs as --sweep writes), attention (its GPU-sized targets' rows added as
// it writes them) and training runs (--metrics' lines, --json). Each becomes
// a figure; bad input gets one line, exit 2, and no figure.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "support.hpp"

namespace bench_plot_emu_test {

using namespace ktune;
using ktune::test::run_command;
namespace fs = std::filesystem;

const std::string kPlot = std::string(KTUNE_SOURCE_DIR) + "/bench/plot.py";

void write(const fs::path& path, const nlohmann::json& j) { std::ofstream(path) << j.dump(2); }

std::string head(const fs::path& path, std::size_t n) {
  std::ifstream in(path, std::ios::binary);
  std::string s(n, '\0');
  in.read(s.data(), static_cast<std::streamsize>(n));
  s.resize(static_cast<std::size_t>(in.gcount()));
  return s;
}

/// Runs the script; its exit code, its output in `text`.
int plot(const fs::path& out, const std::vector<fs::path>& files, std::string* text) {
  std::string command = kPlot + " " + out.string();
  for (const auto& f : files) command += " " + f.string();
  return run_command(command, text);
}

/// A figure from `files`: exit 0, a PNG (or SVG) where asked, one line naming it.
void check_figure(const fs::path& out, const std::vector<fs::path>& files, const std::string& kind) {
  std::string text;
  const int rc = plot(out, files, &text);
  INFO(text);
  REQUIRE(rc == 0);
  CHECK(text.find(out.string() + ": " + kind) != std::string::npos);
  REQUIRE(fs::exists(out));
  // Made as any file the user writes: the permissions of one made here now (not a temporary file's 0600).
  const fs::path probe = out.parent_path() / "probe.txt";
  std::ofstream(probe) << "x";
  CHECK(fs::status(out).permissions() == fs::status(probe).permissions());
  fs::remove(probe);
  if (out.extension() == ".png") CHECK(head(out, 8) == "\x89PNG\r\n\x1a\n");
  else CHECK(head(out, 200).find("<svg") != std::string::npos);
}

TEST_CASE("bench/plot.py draws every benchmark's JSON and refuses bad input in one line", "[bench][emu][once]") {
  std::string text;
  if (run_command("/usr/bin/python3 -c 'import matplotlib'", &text) != 0) {  // the script's interpreter
    std::printf("skipped: /usr/bin/python3 has no matplotlib (scripts/setup installs python3-matplotlib)\n");
    std::exit(test::kSkipCode);
  }
  const fs::path dir = test::scratch_dir("plot");

  SECTION("adam and ops, from the CLI on the emulation") {
    const std::string bench = test::ktune_exe().string() + " bench ";
    REQUIRE(run_command(bench + "adam --backend emu --tensors 1,2 --numel 1000,3000 --json-out " +
                            (dir / "adam.json").string(), &text) == 0);
    check_figure(dir / "adam.png", {dir / "adam.json"}, "adam, 1 result from 1 file");
    REQUIRE(run_command(bench + "ops --backend emu --model tiny --ctx 8,13 --batch 1 --families rmsnorm_fwd,"
                                "swiglu_fwd --json-out " + (dir / "ops.json").string(), &text) == 0);
    check_figure(dir / "ops.svg", {dir / "ops.json"}, "ops, 1 result from 1 file");

    // Two benchmarks in one figure: refused, nothing written.
    CHECK(plot(dir / "mixed.png", {dir / "adam.json", dir / "ops.json"}, &text) == 2);
    CHECK(text == "plot: the files hold different benchmarks (adam, ops); plot one at a time\n");
    CHECK_FALSE(fs::exists(dir / "mixed.png"));
  }

  SECTION("e2e: one run and seed 002's sweep, from the CLI") {
    const std::string e2e = test::ktune_exe().string() + " bench e2e --backend cpu --model tiny ";
    REQUIRE(run_command(e2e + "--batch 1 --ctx 16 --warmup 0 --trials 2 --with-optimizer --json-out " +
                            (dir / "run.json").string(), &text) == 0);
    REQUIRE(run_command(e2e + "--batch 2 --ctx 9 --warmup 1 --trials 2 --forward-only --json-out " +
                            (dir / "forward.json").string(), &text) == 0);
    // --sweep writes its runs as a list of what one run writes.
    std::ifstream run(dir / "run.json"), forward(dir / "forward.json");
    write(dir / "sweep.json", nlohmann::json::array({nlohmann::json::parse(run), nlohmann::json::parse(forward)}));
    check_figure(dir / "e2e.png", {dir / "run.json", dir / "sweep.json"}, "e2e, 3 results from 2 files");
  }

  SECTION("attention: seed 003's table from the CLI, with a target's row as on a GPU") {
    std::string text;
    REQUIRE(run_command(test::ktune_exe().string() + " bench attention --backend emu --tables seed003 --dims 16,32 "
                            "--seqs 9,20 --json-out " + (dir / "attention.json").string(),
                        &text) == 0);
    std::ifstream in(dir / "attention.json");
    auto j = nlohmann::json::parse(in);
    auto target = j["rows"][0];  // the d 128 case: a forward only
    target["table"] = "causal_fwd_d128";
    target.erase("backward");
    j["rows"].push_back(target);
    write(dir / "attention.json", j);
    check_figure(dir / "attention.png", {dir / "attention.json"}, "attention, 1 result from 1 file");
  }

  SECTION("train: a run's --metrics lines and another's --json, from the CLI, side by side") {
    const std::string train = test::ktune_exe().string() + " train --model tiny --ctx 8 --batch 2 --threads 2 ";
    fs::remove(dir / "steps.jsonl");
    REQUIRE(run_command(train + "--steps 6 --eval-every 3 --lr-schedule cosine --warmup-steps 2 --metrics " +
                            (dir / "steps.jsonl").string(), &text) == 0);
    REQUIRE(run_command(train + "--steps 4 --clip-norm 0 --json > " + (dir / "train.json").string(), &text) == 0);
    check_figure(dir / "train.png", {dir / "steps.jsonl", dir / "train.json"}, "train, 2 results from 2 files");
    // A last line cut short (a run still writing, or killed mid-line) is left out, with a warning...
    // A one-step run's --metrics: one line, which is one JSON object too.
    std::ofstream(dir / "one.jsonl") << "{\"step\": 1, \"loss\": 2.0}\n";
    check_figure(dir / "one.png", {dir / "one.jsonl"}, "train, 1 result from 1 file");
    std::ofstream(dir / "cut.jsonl") << "{\"step\": 1, \"loss\": 2.0}\n{\"step\": 2, \"lo";
    CHECK(plot(dir / "cut.png", {dir / "cut.jsonl"}, &text) == 0);
    CHECK(text.find("cut.jsonl: line 2 is cut short (a run still writing, or killed); left out") != std::string::npos);
    // ... a broken line before the last is not, and is named.
    std::ofstream(dir / "broken.jsonl") << "{\"step\": 1, \"loss\": 2.0}\n{\"step\": 2, \"lo\n"
                                           "{\"step\": 3, \"loss\": 1.0}\n";
    CHECK(plot(dir / "broken.png", {dir / "broken.jsonl"}, &text) == 2);
    CHECK(text.find("broken.jsonl: not a readable JSON file (line 2: ") != std::string::npos);
  }

  SECTION("bad input") {
    write(dir / "other.json", {{"benchmark", "nope"}});
    CHECK(plot(dir / "f.png", {dir / "other.json"}, &text) == 2);
    CHECK(text.rfind("plot: ", 0) == 0);
    CHECK(text.find("not the JSON of a ktune benchmark") != std::string::npos);
    CHECK(std::count(text.begin(), text.end(), '\n') == 1);

    write(dir / "short.json", {{"benchmark", "ops"}, {"rows", {{{"family", "x"}}}}});
    CHECK(plot(dir / "f.png", {dir / "short.json"}, &text) == 2);
    CHECK(text.find("without the fields this figure needs") != std::string::npos);

    CHECK(plot(dir / "f.jpg", {dir / "short.json"}, &text) == 2);
    CHECK(text.find("must end in .png, .svg or .pdf") != std::string::npos);
    CHECK(plot(dir / "f.png", {dir / "missing.json"}, &text) == 2);
    CHECK(text.find("not a readable JSON file") != std::string::npos);
    CHECK_FALSE(fs::exists(dir / "f.png"));
    CHECK(fs::directory_iterator(dir) != fs::directory_iterator());  // only the inputs
    for (const auto& e : fs::directory_iterator(dir)) CHECK(e.path().extension() == ".json");
  }
}

}  // namespace bench_plot_emu_test
