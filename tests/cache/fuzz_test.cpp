// Fuzzing the cache reader from the golden file: truncations, byte flips
// and nesting depth. Every mutant either parses (and round-trips) or is one
// kCache error of one short line; never a crash, a hang or another exception.
#include <catch2/catch.hpp>

#include <chrono>
#include <random>

#include "base/error.hpp"
#include "base/files.hpp"
#include "base/json_input.hpp"
#include "cache/store.hpp"

namespace cache_fuzz_test {

using namespace ktune::cache;

namespace {

struct Tally {
  int parsed = 0;
  int refused = 0;
};

void check_mutant(const std::string& text, Tally& tally) {
  try {
    const auto entries = parse_cache(text, "fuzz.json");
    const auto again = parse_cache(serialise_cache(entries), "fuzz.json");  // what is read can be written back
    CHECK(again.size() == entries.size());
    ++tally.parsed;
  } catch (const ktune::Error& e) {
    const std::string what = e.what();
    if (e.kind() != ktune::ErrorKind::kCache || what.find('\n') != std::string::npos || what.size() > 600 ||
        what.find("json.exception") != std::string::npos)
      FAIL_CHECK("bad error for mutant '" << ktune::excerpt(text) << "': " << ktune::to_string(e.kind()) << ": "
                                          << what.substr(0, 600));
    ++tally.refused;
  } catch (const std::exception& e) {
    FAIL_CHECK("mutant '" << ktune::excerpt(text) << "' threw " << e.what());
  }
}

}  // namespace

TEST_CASE("cache fuzz: truncations, byte flips and nesting depth", "[cache][fuzz]") {
  const auto start = std::chrono::steady_clock::now();
  const std::string golden =
      ktune::read_file(std::filesystem::path(KTUNE_SOURCE_DIR) / "tests/cache/golden/tuned_v1.json");
  REQUIRE(parse_cache(golden, "golden").size() == 2);
  Tally tally;

  // Every truncation: all refused but the whole file (and ones that only lose trailing whitespace).
  for (std::size_t n = 0; n < golden.size(); ++n) check_mutant(golden.substr(0, n), tally);
  CHECK(tally.refused >= static_cast<int>(golden.size()) - 2);

  // Byte flips: one to four bytes replaced by arbitrary ones, or a bit flipped.
  std::mt19937_64 rng(20251123);
  std::uniform_int_distribution<std::size_t> where(0, golden.size() - 1);
  std::uniform_int_distribution<int> byte(0, 255), bit(0, 7), flips(1, 4);
  const std::string structural = "{}[]\":,-0123456789eE.tfn \\";
  std::uniform_int_distribution<std::size_t> pick(0, structural.size() - 1);
  for (int i = 0; i < 4000; ++i) {
    std::string m = golden;
    for (int f = flips(rng); f > 0; --f) {
      char& c = m[where(rng)];
      switch (i % 3) {
        case 0: c = static_cast<char>(byte(rng)); break;
        case 1: c = static_cast<char>(c ^ (1 << bit(rng))); break;
        default: c = structural[pick(rng)]; break;
      }
    }
    check_mutant(m, tally);
  }

  // Nesting depth: the config value, nested in arrays or objects, shallow to hostile.
  const std::string config = "{\"block\": 256, \"vec\": 4}";
  const auto at = golden.find(config);
  REQUIRE(at != std::string::npos);
  for (int depth : {1, 10, 50, 60, 61, 62, 63, 64, 65, 100, 1000, 100000}) {
    for (bool arrays : {true, false}) {
      std::string value = "{\"block\": ";
      for (int d = 0; d < depth; ++d) value += arrays ? "[" : "{\"x\": ";
      value += "1";
      for (int d = 0; d < depth; ++d) value += arrays ? "]" : "}";
      value += ", \"vec\": 4}";
      check_mutant(std::string(golden).replace(at, config.size(), value), tally);
      // And unterminated, as a truncated hostile file would be.
      check_mutant(golden.substr(0, at) + value.substr(0, value.size() / 2), tally);
    }
  }
  CHECK(tally.parsed > 0);
  CHECK(tally.refused > 0);
  INFO(tally.parsed << " parsed, " << tally.refused << " refused");
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(60));
}

}  // namespace cache_fuzz_test
