// Cache file safety: concurrent writers lose nothing, a killed writer leaves
// a valid file, bad files give one kCache error and stay byte-identical.
#include "cache/store.hpp"

#include <catch2/catch.hpp>
#include <csignal>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <functional>

#include "base/error.hpp"
#include "base/files.hpp"
#include "support.hpp"

namespace cache_store_test {

using namespace ktune::cache;
namespace fs = std::filesystem;

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
  e.date = "2026-01-01T00:00:00Z";
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
  Entry undated = make_entry("f32;numel=1024;tensors=4", 1024);
  undated.date.clear();  // put() stamps the time
  file.put(undated);
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

TEST_CASE("lock files are removed when free, and writers through a link and the real path stay serialised",
          "[cache]") {
  const auto dir = ktune::test::scratch_dir("cache-lock-litter");
  const auto real = dir / "tuned.json";
  CacheFile(real).put(make_entry("f32;numel=1", 1));
  CHECK_FALSE(fs::exists(dir / "tuned.json.lock"));
  fs::create_symlink("tuned.json", dir / "link.json");
  // Four processes, two through the link and two through the real name, each
  // taking and removing the lock 20 times: every entry arrives.
  constexpr int kPerProcess = 20;
  std::vector<pid_t> children;
  for (int proc = 0; proc < 4; ++proc) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int code = 0;
      try {
        CacheFile file(proc % 2 ? dir / "link.json" : real);
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
  CHECK(CacheFile(real).load().size() == 1 + 4 * kPerProcess);
  CHECK_FALSE(fs::exists(dir / "tuned.json.lock"));
  CHECK_FALSE(fs::exists(dir / "link.json.lock"));
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
  SECTION("blank") { text = "\n"; }
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

TEST_CASE("an empty file (0 bytes, as mktemp makes it) is an empty cache, written over", "[cache]") {
  const auto path = ktune::test::scratch_dir("cache-empty") / "tuned.json";
  write_text(path, "");
  CHECK(CacheFile(path).load().empty());
  CacheFile(path).put(make_entry("f32;numel=1", 1));
  CHECK(CacheFile(path).load().size() == 1);
}

TEST_CASE("the golden v1 file still loads", "[cache]") {
  const auto golden = std::filesystem::path(KTUNE_SOURCE_DIR) / "tests/cache/golden/tuned_v1.json";
  const auto entries = CacheFile(golden).load();
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].key.family == "adamw");
  CHECK(entries[0].repetitions == 100);
}

namespace {
// The kind and message of what `action` throws; kInternal with "" when nothing.
std::pair<ktune::ErrorKind, std::string> error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const ktune::Error& e) {
    return {e.kind(), e.what()};
  }
  return {ktune::ErrorKind::kInternal, ""};
}

std::string golden_text() {
  return ktune::read_file(std::filesystem::path(KTUNE_SOURCE_DIR) / "tests/cache/golden/tuned_v1.json");
}
}  // namespace

TEST_CASE("values a cache file cannot hold are refused, never wrapped or misread", "[cache]") {
  auto doc = nlohmann::json::parse(golden_text());
  std::string expect;
  SECTION("a dim above INT64_MAX") {
    doc["entries"][0]["key"]["dims"]["numel"] = 10000000000000000000ull;
    expect = "shape dimension 'numel'";
  }
  SECTION("a negative dim") {
    doc["entries"][0]["key"]["dims"]["numel"] = -1;
    expect = "shape dimension 'numel'";
  }
  SECTION("schema_version 2^32 + 1") {
    doc["schema_version"] = 4294967297ull;
    expect = "schema version 4294967297";
  }
  SECTION("a schema_version above INT64_MAX") {
    doc["schema_version"] = 18446744073709551615ull;
    expect = "no integer schema_version";
  }
  SECTION("a non-string format") {
    doc["format"] = 7;
    expect = "is not a ktune tuned cache";
  }
  SECTION("a negative time") {
    doc["entries"][0]["time_ms"] = -0.5;
    expect = "'time_ms' must be a finite number >= 0";
  }
  SECTION("a negative percentile") {
    doc["entries"][1]["p20_ms"] = -1;
    expect = "'p20_ms'";
  }
  SECTION("negative repetitions") {
    doc["entries"][1]["repetitions"] = -100;
    expect = "'repetitions'";
  }
  SECTION("a deterministic pick with no config") {
    doc["entries"][0]["deterministic"] = {{"time_ms", 1.0}};
    expect = "entry field 'deterministic' must be an object holding a 'config' object and a 'time_ms' >= 0";
  }
  SECTION("a deterministic pick with a negative time") {
    doc["entries"][0]["deterministic"] = {{"config", {{"vec", 4}}}, {"time_ms", -1.0}};
    expect = "entry field 'deterministic'";
  }
  const auto [kind, what] = error_of([&] { parse_cache(doc.dump(), "t.json"); });
  CHECK(kind == ktune::ErrorKind::kCache);
  CHECK_THAT(what, Catch::Contains(expect) && Catch::Contains("t.json") && !Catch::Contains("json.exception"));
}

TEST_CASE("fields a newer ktune added to an entry or its key are written back as they were by put, merge and prune, "
          "and an entry a new measurement replaces takes none of them",
          "[cache]") {
  const auto dir = ktune::test::scratch_dir("cache-unknown-fields");
  nlohmann::json doc = nlohmann::json::parse(serialise_cache(
      {make_entry("f32;numel=8;tensors=4", 8), make_entry("f32;numel=16;tensors=4", 16)}));
  for (auto& j : doc["entries"]) {
    j["energy_j"] = {{"median", 0.25}, {"unit", "J"}};
    j["key"]["compiler_flags"] = "-O3";
  }
  write_text(dir / "tuned.json", doc.dump(1));
  const auto kept = [&](const std::string& problem) {
    const auto written = nlohmann::json::parse(ktune::read_file(dir / "tuned.json"));
    for (const auto& j : written["entries"])
      if (j["key"]["problem_key"] == problem)
        return j.contains("energy_j") && j["energy_j"]["unit"] == "J" && j["key"]["compiler_flags"] == "-O3";
    FAIL("no entry for " << problem);
    return false;
  };
  CacheFile file(dir / "tuned.json");
  REQUIRE(file.load().size() == 2);
  CHECK(file.load()[0].key.identity() == make_entry("f32;numel=16;tensors=4", 16).key.identity());
  file.put(make_entry("f32;numel=32;tensors=4", 32));  // another key: what tune writes beside them
  CHECK(kept("f32;numel=8;tensors=4"));
  CHECK(kept("f32;numel=16;tensors=4"));
  CHECK(file.merge_from({make_entry("f32;numel=64;tensors=4", 64)}) == 1);
  CHECK(kept("f32;numel=8;tensors=4"));
  file.update([](std::vector<Entry>& entries) {  // a prune that drops nothing, written anyway
    CHECK(prune_entries(entries, PruneOptions{}) == 0);
    return true;
  });
  CHECK(kept("f32;numel=16;tensors=4"));
  file.put(make_entry("f32;numel=8;tensors=4", 8, 0.5));  // measured again: the old entry's fields go with it
  CHECK_FALSE(kept("f32;numel=8;tensors=4"));
  CHECK(kept("f32;numel=16;tensors=4"));
}

TEST_CASE("duplicate entries collapse on merge: a file merged into its own copy adds nothing", "[cache]") {
  const auto dir = ktune::test::scratch_dir("cache-duplicates");
  Entry a = make_entry("f32;numel=8;tensors=4", 8, 1.0);
  Entry worse = a;
  worse.spread = 0.5;  // same key, same interval, worse measured
  std::vector<Entry> with_duplicates{worse, a, make_entry("f32;numel=16;tensors=4", 16)};
  const std::string text = serialise_cache(with_duplicates);
  write_text(dir / "a.json", text);
  write_text(dir / "copy.json", text);
  const auto incoming = CacheFile(dir / "copy.json").load();
  REQUIRE(incoming.size() == 3);
  CHECK(CacheFile(dir / "a.json").merge_from(incoming) == 0);
  const auto merged = CacheFile(dir / "a.json").load();
  REQUIRE(merged.size() == 2);  // the duplicate went, the better-measured one stayed
  for (const auto& e : merged)
    if (e.key.problem_key == a.key.problem_key) CHECK(e.spread == a.spread);
  std::vector<Entry> into;
  CHECK(merge_entries(into, incoming).changed() == 2);  // keys, not rows
  CHECK(into.size() == 2);
}

TEST_CASE("a deterministic pick round-trips, stays through a newer tuning that measured none or a slower one, and "
          "merge keeps the faster one",
          "[cache]") {
  const auto dir = ktune::test::scratch_dir("cache-deterministic");
  CacheFile file(dir / "tuned.json");
  Entry e = make_entry("f32;numel=8;tensors=4", 8, 1.0);
  e.deterministic = DeterministicPick{{{"block", 128}, {"vec", 2}}, 1.5};
  file.put(e);
  REQUIRE(file.load().size() == 1);
  REQUIRE(file.load()[0].deterministic);
  CHECK(file.load()[0].deterministic->config == e.deterministic->config);
  CHECK(file.load()[0].deterministic->time_ms == 1.5);
  // An older entry has none, and writes none.
  CHECK_FALSE(to_json(make_entry("f32;numel=8;tensors=4", 8)).contains("deterministic"));
  // A newer winner that measured no deterministic config, or a slower one, keeps the pick; a faster one replaces it.
  file.put(make_entry("f32;numel=8;tensors=4", 8, 0.5));
  REQUIRE(file.load()[0].deterministic);
  CHECK(file.load()[0].time_ms == 0.5);
  CHECK(file.load()[0].deterministic->time_ms == 1.5);
  Entry again = make_entry("f32;numel=8;tensors=4", 8, 0.5);
  again.deterministic = DeterministicPick{{{"block", 64}, {"vec", 4}}, 1.75};
  file.put(again);
  CHECK(file.load()[0].deterministic->time_ms == 1.5);
  again.deterministic->time_ms = 1.4;
  file.put(again);
  CHECK(file.load()[0].deterministic->time_ms == 1.4);
  CHECK(file.load()[0].deterministic->config == again.deterministic->config);
  // Merge: the better-measured winner stays, with the faster of the two picks, whichever entry held it.
  Entry slow_winner = make_entry("f32;numel=8;tensors=4", 8, 2.0);
  slow_winner.deterministic = DeterministicPick{{{"block", 32}, {"vec", 1}}, 1.25};
  std::vector<Entry> into{again};
  CHECK(merge_entries(into, {slow_winner}).changed() == 1);  // its pick is taken
  REQUIRE(into.size() == 1);
  CHECK(into[0].time_ms == 0.5);
  CHECK(into[0].deterministic->time_ms == 1.25);
  CHECK(merge_entries(into, {slow_winner}).changed() == 0);  // idempotent
  Entry fast_winner = make_entry("f32;numel=8;tensors=4", 8, 0.25);
  CHECK(merge_entries(into, {fast_winner}).changed() == 1);
  CHECK(into[0].time_ms == 0.25);
  REQUIRE(into[0].deterministic);
  CHECK(into[0].deterministic->time_ms == 1.25);
  std::vector<Entry> duplicates{fast_winner, slow_winner};
  collapse_duplicates(duplicates);
  REQUIRE(duplicates.size() == 1);
  CHECK(duplicates[0].time_ms == 0.25);
  REQUIRE(duplicates[0].deterministic);
  CHECK(duplicates[0].deterministic->time_ms == 1.25);
}

TEST_CASE("a tuning session's winner replaces the entry it competed with, not a better one another process wrote "
          "meanwhile",
          "[cache]") {
  const auto dir = ktune::test::scratch_dir("cache-put-winner");
  CacheFile file(dir / "tuned.json");
  const std::string problem = "f32;numel=8;tensors=4";
  Entry old = make_entry(problem, 8, 1.0);
  old.config = {{"block", 64}, {"vec", 1}};
  file.put(old);
  // The session read the file (old), measured old's config too, and found a slower winner: it replaces old.
  const std::vector<Entry> seen = file.load();
  Entry winner = make_entry(problem, 8, 2.0);
  CHECK_FALSE(file.put_winner(winner, seen));
  REQUIRE(file.load().size() == 1);
  CHECK(file.load()[0].config == winner.config);
  // Another session wrote a faster entry after this one read the file: it never competed, and it stays.
  Entry faster = make_entry(problem, 8, 0.5);
  faster.config = {{"block", 128}, {"vec", 2}};
  faster.date = "2026-01-02T00:00:00Z";
  file.put(faster);
  const auto kept = file.put_winner(winner, seen);
  REQUIRE(kept);
  CHECK(kept->config == faster.config);
  REQUIRE(file.load().size() == 1);
  CHECK(file.load()[0].config == faster.config);
  CHECK(file.load()[0].time_ms == 0.5);
  // A slower one written meanwhile goes: the winner is the better of the two.
  Entry slower = make_entry(problem, 8, 3.0);
  slower.config = {{"block", 32}, {"vec", 4}};
  file.put(slower);
  CHECK_FALSE(file.put_winner(winner, seen));
  CHECK(file.load()[0].config == winner.config);
  // Into a file that held nothing for the key when the session read it, likewise.
  file.put(faster);
  CHECK(file.put_winner(winner, {}));
  CHECK(file.load()[0].config == faster.config);
}

TEST_CASE("a deterministic session's winner replaces the pick it read beside an entry by atomics, not a faster one "
          "another process wrote meanwhile",
          "[cache]") {
  const auto dir = ktune::test::scratch_dir("cache-put-pick");
  CacheFile file(dir / "tuned.json");
  const std::string problem = "f32;numel=8;tensors=4";
  const auto atomic = [](const nlohmann::json& config) { return config.at("block") == 64; };
  Entry winner = make_entry(problem, 8, 2.0);
  winner.config = {{"block", 128}, {"vec", 1}};
  // No entry by atomics for the key: nothing is written, the winner goes in as an entry (put_winner).
  auto put = file.put_deterministic_pick(winner, {}, atomic);
  CHECK_FALSE(put.beside);
  CHECK(file.load().empty());
  Entry by_atomics = make_entry(problem, 8, 1.0);
  by_atomics.config = {{"block", 64}, {"vec", 1}};
  by_atomics.deterministic = DeterministicPick{{{"block", 32}, {"vec", 1}}, 1.5};
  file.put(by_atomics);
  // The session read the entry with its faster pick (1.5 ms) and found a slower winner: the newer tuning wins.
  const std::vector<Entry> seen = file.load();
  put = file.put_deterministic_pick(winner, seen, atomic);
  CHECK(put.beside);
  CHECK_FALSE(put.kept);
  REQUIRE(file.load()[0].deterministic);
  CHECK(file.load()[0].deterministic->config == winner.config);
  CHECK(file.load()[0].config == by_atomics.config);
  // Another session wrote a faster pick after this one read the file: it never competed, and it stays.
  const auto write_pick = [&](const DeterministicPick& pick) {
    file.update([&](std::vector<Entry>& entries) {
      entries.at(0).deterministic = pick;
      return true;
    });
  };
  const DeterministicPick faster{{{"block", 256}, {"vec", 2}}, 0.75};
  write_pick(faster);
  put = file.put_deterministic_pick(winner, seen, atomic);
  CHECK(put.beside);
  REQUIRE(put.kept);
  CHECK(put.kept->time_ms == 0.75);
  CHECK(file.load()[0].deterministic->config == faster.config);
  // A slower one written meanwhile goes.
  write_pick({{{"block", 512}, {"vec", 4}}, 3.0});
  put = file.put_deterministic_pick(winner, seen, atomic);
  CHECK_FALSE(put.kept);
  CHECK(file.load()[0].deterministic->config == winner.config);
}

TEST_CASE("merge: an entry of fewer than 3 repetitions, whose interval measures nothing, never wins over a "
          "measured one", "[cache]") {
  Entry measured = make_entry("f32;numel=8;tensors=4", 8, 280.0);
  measured.p20_ms = 270;
  measured.p80_ms = 300;
  measured.spread = 30.0 / 280.0;
  measured.repetitions = 20;
  Entry once = make_entry("f32;numel=8;tensors=4", 8, 290.0);
  once.p20_ms = once.p80_ms = 290;
  once.spread = 0;
  once.repetitions = 1;
  CHECK_FALSE(better_than(once, measured));
  CHECK(better_than(measured, once));
  std::vector<Entry> into{measured};
  CHECK(merge_entries(into, {once}).changed() == 0);
  CHECK(into.front().time_ms == 280.0);
  // Nor does one a hair below the measured one's interval: its empty interval is disjoint from any other.
  once.time_ms = once.p20_ms = once.p80_ms = 269.9;
  CHECK_FALSE(better_than(once, measured));
  CHECK(merge_entries(into, {once}).changed() == 0);
  CHECK(into.front().time_ms == 280.0);
  // Of two such entries, the faster stays where no measured one is.
  Entry twice = once;
  twice.time_ms = twice.p20_ms = twice.p80_ms = 250;
  twice.repetitions = 2;
  CHECK(better_than(twice, once));
}

TEST_CASE("prune: the version filters go first, and what they drop supersedes nothing", "[cache]") {
  Entry current = make_entry("f32;numel=8;tensors=4", 8);
  current.date = "2026-11-29T00:00:00Z";
  Entry stale = current;  // the same problem on the same GPU, another source, dated later
  stale.key.source_hash = "h0";
  stale.config = {{"block", 128}, {"vec", 2}};
  stale.date = "2027-01-01T00:00:00Z";
  std::vector<Entry> entries{current, stale};
  PruneOptions keep_h1;
  keep_h1.family = "adamw";
  keep_h1.source_hash = "h1";
  CHECK(prune_entries(entries, keep_h1) == 1);
  REQUIRE(entries.size() == 1);
  CHECK(entries.front().key.source_hash == "h1");
}

TEST_CASE("prune keeps the entry this build can use over a newer one of another ktune's source", "[cache]") {
  // A fleet of two ktune versions writes one cache: the other version's entry is newer, and this build cannot
  // use it (its kernel source differs); this build's own entry stays, the other goes.
  Entry current = make_entry("f32;numel=8;tensors=4", 8);
  current.date = "2026-11-29T00:00:00Z";
  Entry other_source = current;
  other_source.key.source_hash = "h0";
  other_source.config = {{"block", 128}, {"vec", 2}};
  other_source.date = "2027-01-01T00:00:00Z";
  PruneOptions options;
  options.usable = [](const Entry& e) { return e.key.source_hash == "h1"; };
  std::vector<Entry> entries{other_source, current};
  CHECK(prune_entries(entries, options) == 1);
  REQUIRE(entries.size() == 1);
  CHECK(entries.front().key.source_hash == "h1");
  // Without the predicate (every entry usable), the newest stays, as before.
  entries = {other_source, current};
  CHECK(prune_entries(entries, PruneOptions{}) == 1);
  REQUIRE(entries.size() == 1);
  CHECK(entries.front().key.source_hash == "h0");
}

TEST_CASE("prune --family prunes that family only, its superseded entries too", "[cache]") {
  Entry older = make_entry("f32;numel=8;tensors=4", 8);
  older.date = "2026-11-29T00:00:00Z";
  Entry newer = older;  // superseded by date
  newer.key.driver_version = "13010";
  newer.date = "2027-01-01T00:00:00Z";
  Entry other_older = older, other_newer = newer;  // the same pair, of another family
  other_older.key.family = other_newer.key.family = "swiglu_fwd";
  std::vector<Entry> entries{older, newer, other_older, other_newer};
  PruneOptions adamw;
  adamw.family = "adamw";
  CHECK(prune_entries(entries, adamw) == 1);
  REQUIRE(entries.size() == 3);
  CHECK(std::count_if(entries.begin(), entries.end(), [](const Entry& e) { return e.key.family == "swiglu_fwd"; }) ==
        2);
  CHECK(std::none_of(entries.begin(), entries.end(),
                     [](const Entry& e) { return e.key.family == "adamw" && e.date == "2026-11-29T00:00:00Z"; }));
  CHECK(prune_entries(entries, PruneOptions{}) == 1);  // without --family: every family's
  CHECK(entries.size() == 2);
}

TEST_CASE("a cache entry's date is ISO 8601 UTC, its percentiles ordered, its time measured: else a cache error",
          "[cache]") {
  for (const char* date : {"2025-01-01T00:00:00Z", "2024-02-29T23:59:59Z", "2025-01-01T00:00:00.125Z"}) {
    INFO(date);
    auto doc = nlohmann::json::parse(golden_text());
    doc["entries"][0]["date"] = date;
    CHECK(parse_cache(doc.dump(), "t.json").front().date == date);
  }
  std::string expect;
  auto doc = nlohmann::json::parse(golden_text());
  SECTION("a word for a date") {
    doc["entries"][0]["date"] = "yesterday";
    expect = "entry field 'date' must be ISO 8601 UTC (YYYY-MM-DDTHH:MM:SSZ), got 'yesterday'";
  }
  SECTION("a date with no time zone") {
    doc["entries"][0]["date"] = "2025-01-01T00:00:00";
    expect = "'date' must be ISO 8601 UTC";
  }
  SECTION("a date that is no day") {
    doc["entries"][1]["date"] = "2025-02-30T00:00:00Z";
    expect = "'date' must be ISO 8601 UTC";
  }
  SECTION("a date to come, which would supersede every later measurement of its key") {
    doc["entries"][1]["date"] = "2999-01-01T00:00:00Z";
    expect = "entry field 'date' is 2999-01-01T00:00:00Z, more than a day from now";
  }
  SECTION("an empty date") {
    doc["entries"][1]["date"] = "";
    expect = "'date' must be ISO 8601 UTC";
  }
  SECTION("p20 above p80") {
    doc["entries"][0]["p20_ms"] = 2.0;
    doc["entries"][0]["p80_ms"] = 1.0;
    expect = "p20 <= p80";
  }
  SECTION("no repetition behind the time, in an entry named by its place and key") {
    doc["entries"][1]["repetitions"] = 0;
    expect = "entries[1] (" + doc["entries"][1]["key"]["family"].get<std::string>() + ", " +
             doc["entries"][1]["key"]["problem_key"].get<std::string>() + "): entry field 'repetitions' must be at "
             "least 1";
  }
  const auto [kind, what] = error_of([&] { parse_cache(doc.dump(), "t.json"); });
  CHECK(kind == ktune::ErrorKind::kCache);
  CHECK_THAT(what, Catch::Contains(expect) && Catch::Contains("t.json"));
}

TEST_CASE("hostile cache files: too big or too deep is one kCache error, quickly", "[cache]") {
  const auto dir = ktune::test::scratch_dir("cache-hostile");
  {
    std::ofstream(dir / "big.json") << "{";
    std::filesystem::resize_file(dir / "big.json", kMaxCacheFileBytes + 1);  // sparse: costs no disk
  }
  auto [kind, what] = error_of([&] { CacheFile(dir / "big.json").load(); });
  CHECK(kind == ktune::ErrorKind::kCache);
  CHECK_THAT(what, Catch::Contains("more than the 67108864"));

  auto doc = nlohmann::json::parse(golden_text());
  std::string deep = doc.dump();
  std::string nest;
  for (int i = 0; i < 100000; ++i) nest += "{\"x\":";
  nest += "1" + std::string(100000, '}');
  deep.replace(deep.find("{\"block\":256,\"vec\":4}"), std::string("{\"block\":256,\"vec\":4}").size(), nest);
  write_text(dir / "deep.json", deep);
  std::tie(kind, what) = error_of([&] { CacheFile(dir / "deep.json").load(); });
  CHECK(kind == ktune::ErrorKind::kCache);
  CHECK_THAT(what, Catch::Contains("nested deeper than"));
  std::tie(kind, what) = error_of([&] { CacheFile(dir / "deep.json").merge_from({make_entry("f32;numel=1", 1)}); });
  CHECK(kind == ktune::ErrorKind::kCache);
  CHECK(ktune::read_file(dir / "deep.json") == deep);

  // An unterminated string is quoted by a short excerpt, not echoed whole.
  write_text(dir / "open.json", "{\"format\": \"" + std::string(1 << 20, 'a'));
  std::tie(kind, what) = error_of([&] { CacheFile(dir / "open.json").load(); });
  CHECK(kind == ktune::ErrorKind::kCache);
  CHECK(what.size() < 600);
}

TEST_CASE("one file policy for cache writers: directory, read-only, symlink, missing folder", "[cache]") {
  const auto dir = ktune::test::scratch_dir("cache-files");
  const Entry e = make_entry("f32;numel=2;tensors=4", 2);

  SECTION("a directory is a clear error and gets no lock beside it") {
    fs::create_directory(dir / "d.json");
    for (auto action : std::vector<std::function<void()>>{[&] { CacheFile(dir / "d.json").put(e); },
                                                          [&] { CacheFile(dir / "d.json").load(); },
                                                          [&] { CacheFile(dir / "d.json").check_writable(); }}) {
      const auto [kind, what] = error_of(action);
      CHECK(kind == ktune::ErrorKind::kInvalidInput);
      CHECK_THAT(what, Catch::Contains("is a directory"));
    }
    CHECK_FALSE(fs::exists(dir / "d.json.lock"));
  }
  SECTION("a read-only cache is refused, not replaced") {
    CacheFile(dir / "ro.json").put(e);
    const std::string before = ktune::read_file(dir / "ro.json");
    fs::permissions(dir / "ro.json", fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
    const auto [kind, what] = error_of([&] { CacheFile(dir / "ro.json").put(make_entry("f32;numel=4", 4)); });
    CHECK(kind == ktune::ErrorKind::kInvalidInput);
    CHECK_THAT(what, Catch::Contains("read-only"));
    CHECK(ktune::read_file(dir / "ro.json") == before);
    CHECK((fs::status(dir / "ro.json").permissions() & fs::perms::owner_write) == fs::perms::none);
  }
  SECTION("a symlinked cache is written through to its target, whose lock is taken") {
    fs::create_directory(dir / "real");
    CacheFile(dir / "real" / "tuned.json").put(e);
    fs::create_symlink("real/tuned.json", dir / "link.json");
    CacheFile(dir / "link.json").put(make_entry("f32;numel=4;tensors=4", 4));
    CHECK(fs::is_symlink(dir / "link.json"));
    CHECK(CacheFile(dir / "real" / "tuned.json").load().size() == 2);
    CHECK_FALSE(fs::exists(dir / "real" / "tuned.json.lock"));  // removed when free
    CHECK_FALSE(fs::exists(dir / "link.json.lock"));
  }
  SECTION("a missing parent folder is created") {
    CacheFile(dir / "new" / "deeper" / "tuned.json").put(e);
    CHECK(CacheFile(dir / "new" / "deeper" / "tuned.json").load().size() == 1);
  }
  SECTION("an input that does not exist is bad input, not an empty cache") {
    const auto [kind, what] = error_of([&] { CacheFile(dir / "missing.json").load_input(); });
    CHECK(kind == ktune::ErrorKind::kInvalidInput);
    CHECK_THAT(what, Catch::Contains("does not exist"));
    CHECK(CacheFile(dir / "missing.json").load().empty());  // a cache about to be written may be missing
    CHECK_FALSE(fs::exists(dir / "missing.json.lock"));
  }
}

}  // namespace cache_store_test
