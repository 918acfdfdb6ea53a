// Cache file safety: concurrent writers lose nothing, a killed writer leaves
// a valid file, bad files give one kCache error and stay byte-identical.
#include "cache/store.hpp"

#include <catch2/catch.hpp>
#include <csignal>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "base/error.hpp"
#include "base/files.hpp"
#include "support.hpp"

using namespace ktune::cache;

namespace {
Entry make_entry(const std::string& problem, std::int64_t numel, double time_ms = 1.0) {
  Entry e;
  e.key = {"adamw", "h1", problem, "f32", "sm_90", "NVIDIA H100", "13.0", "13000", {{"numel", numel}, {"tensors", 4}}};
  e.config = {{"block", 256}, {"vec", 4}};
  e.time_ms = time_ms;
  e.p20_ms = time_ms * 0.99;
  e.p80_ms = time_ms * 1.01;
  e.spread = 0.02;
  e.evaluations = 40;
  e.repetitions = 50;
  return e;
}

void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}
}  // namespace

TEST_CASE("cache round-trips entries with named fields", "[cache]") {
  const auto dir = ktune::test::scratch_dir("cache-roundtrip");
  CacheFile file(dir / "tuned.json");
  CHECK(file.load().empty());
  file.put(make_entry("f32;numel=1024;tensors=4", 1024));
  const auto entries = file.load();
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].config["block"] == 256);
  CHECK(entries[0].key.dims.at("numel") == 1024);
  CHECK(!entries[0].date.empty());
  CHECK(entries[0].ktune_version == ktune::ktune_version());
  const auto doc = nlohmann::json::parse(ktune::read_file(dir / "tuned.json"));
  CHECK(doc["schema_version"] == kSchemaVersion);
  CHECK(doc["entries"][0]["key"]["problem_key"] == "f32;numel=1024;tensors=4");
  // Same full key: the newer tuning replaces the old one.
  file.put(make_entry("f32;numel=1024;tensors=4", 1024, 0.5));
  REQUIRE(file.load().size() == 1);
  CHECK(file.load()[0].time_ms == 0.5);
}

TEST_CASE("concurrent writers from two processes lose nothing", "[cache]") {
  const auto dir = ktune::test::scratch_dir("cache-concurrent");
  const auto path = dir / "tuned.json";
  constexpr int kPerProcess = 25;
  std::vector<pid_t> children;
  for (int proc = 0; proc < 2; ++proc) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int code = 0;
      try {
        CacheFile file(path);
        for (int i = 0; i < kPerProcess; ++i) {
          const std::int64_t n = 1000 * (proc + 1) + i;
          file.put(make_entry("f32;numel=" + std::to_string(n), n));
        }
      } catch (...) {
        code = 1;
      }
      ::_exit(code);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  CHECK(CacheFile(path).load().size() == 2 * kPerProcess);
}

TEST_CASE("a writer killed mid-write leaves a valid file", "[cache]") {
  const auto dir = ktune::test::scratch_dir("cache-killed");
  const auto path = dir / "tuned.json";
  CacheFile(path).put(make_entry("f32;numel=1", 1));
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    CacheFile file(path);
    for (std::int64_t i = 2;; ++i) file.put(make_entry("f32;numel=" + std::to_string(i), i));
  }
  ::usleep(150 * 1000);
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFSIGNALED(status));
  const auto entries = CacheFile(path).load();  // parses: never a torn file
  CHECK(entries.size() >= 1);
  // The lock dies with the writer: the next writer is not blocked.
  CacheFile(path).put(make_entry("f32;numel=0", 0));
  CHECK(CacheFile(path).load().size() == entries.size() + 1);
}

TEST_CASE("corrupt, truncated and newer-schema files: one error, file untouched", "[cache]") {
  const auto dir = ktune::test::scratch_dir("cache-bad");
  const auto path = dir / "tuned.json";
  CacheFile(dir / "good.json").put(make_entry("f32;numel=1", 1));
  const std::string good = ktune::read_file(dir / "good.json");

  std::string text;
  SECTION("truncated") { text = good.substr(0, good.size() / 2); }
  SECTION("corrupt") { text = "{\"format\": garbage"; }
  SECTION("empty") { text = ""; }
  SECTION("not a cache") { text = "{\"hello\": 1}"; }
  SECTION("newer schema") {
    auto doc = nlohmann::json::parse(good);
    doc["schema_version"] = kSchemaVersion + 1;
    text = doc.dump();
  }
  SECTION("malformed entry") {
    auto doc = nlohmann::json::parse(good);
    doc["entries"][0]["time_ms"] = "fast";
    text = doc.dump();
  }
  write_text(path, text);
  CacheFile file(path);
  auto expect_cache_error = [&](auto&& action) {
    try {
      action();
      FAIL("expected a cache error");
    } catch (const ktune::Error& e) {
      CHECK(e.kind() == ktune::ErrorKind::kCache);
      CHECK_THAT(e.what(), Catch::Contains(path.string()));
      CHECK(std::string(e.what()).find('\n') == std::string::npos);
    }
  };
  expect_cache_error([&] { file.load(); });
  expect_cache_error([&] { file.put(make_entry("f32;numel=2", 2)); });
  expect_cache_error([&] { file.merge_from({make_entry("f32;numel=3", 3)}); });
  CHECK(ktune::read_file(path) == text);
}

TEST_CASE("the golden v1 file still loads", "[cache]") {
  const auto golden = std::filesystem::path(KTUNE_SOURCE_DIR) / "tests/cache/golden/tuned_v1.json";
  const auto entries = CacheFile(golden).load();
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].key.family == "adamw");
  CHECK(entries[0].repetitions == 100);
}
