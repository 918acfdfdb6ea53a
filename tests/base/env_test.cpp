// KTUNE_EMU_SCHEDULE: the three orders and a seed are read; anything else is
// refused with one line naming the variable and what it accepts. The cache
// folder without HOME: this user's own, private, another's refused.
#include "base/env.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "base/error.hpp"
#include "support.hpp"

namespace base_env_test {

namespace {

using ktune::env::EmuSchedule;

using Variable = ktune::test::ScopedEnv;

EmuSchedule read(const char* value) {
  Variable v("KTUNE_EMU_SCHEDULE", value);
  return ktune::env::emu_schedule();
}

}  // namespace

TEST_CASE("KTUNE_EMU_SCHEDULE: shuffled (seed 1) by default, in-order, reverse, shuffle with the seed given",
          "[base][env]") {
  // Shuffled unless told: a kernel missing a barrier fails a check as it may on a GPU, not only now and then.
  CHECK(read(nullptr).order == EmuSchedule::Order::kShuffle);
  CHECK(read(nullptr).seed == 1);
  CHECK(read("").order == EmuSchedule::Order::kShuffle);
  CHECK(read("in-order").order == EmuSchedule::Order::kInOrder);
  CHECK(read("reverse").order == EmuSchedule::Order::kReverse);
  CHECK(read("shuffle").order == EmuSchedule::Order::kShuffle);
  CHECK(read("shuffle").seed == 1);
  CHECK(read("shuffle:0").seed == 0);
  CHECK(read("shuffle:18446744073709551615").seed == 18446744073709551615ull);
}

TEST_CASE("KTUNE_EMU_SCHEDULE: any other value is refused in one line", "[base][env]") {
  for (const char* bad : {"random", "Reverse", "shuffle:", "shuffle:-1", "shuffle:1x", "shuffle: 3",
                          "shuffle:18446744073709551616", "in-order "}) {
    INFO(bad);
    Variable v("KTUNE_EMU_SCHEDULE", bad);
    try {
      ktune::env::emu_schedule();
      FAIL("accepted");
    } catch (const ktune::Error& e) {
      CHECK(e.kind() == ktune::ErrorKind::kInvalidInput);
      CHECK_THAT(e.what(), Catch::Contains("KTUNE_EMU_SCHEDULE must be in-order, reverse or shuffle[:SEED]"));
      CHECK(std::string(e.what()).find('\n') == std::string::npos);
    }
  }
}

namespace {

// cache_dir() with no KTUNE_CACHE_DIR, XDG_CACHE_HOME or HOME, and TMPDIR at `tmp`.
std::filesystem::path fallback_in(const std::filesystem::path& tmp) {
  Variable cache("KTUNE_CACHE_DIR", nullptr), xdg("XDG_CACHE_HOME", nullptr), home("HOME", nullptr),
      tmpdir("TMPDIR", tmp.c_str());
  return ktune::env::cache_dir();
}

void expect_fallback_refused(const std::filesystem::path& tmp, const std::string& why) {
  try {
    fallback_in(tmp);
    FAIL("accepted");
  } catch (const ktune::Error& e) {
    CHECK(e.kind() == ktune::ErrorKind::kInvalidInput);
    CHECK_THAT(e.what(), Catch::Contains("used without HOME or XDG_CACHE_HOME") && Catch::Contains(why) &&
                             Catch::Contains("set KTUNE_CACHE_DIR"));
    CHECK(std::string(e.what()).find('\n') == std::string::npos);
  }
}

}  // namespace

TEST_CASE("Without HOME the cache is this user's own folder in TMPDIR, made private, another's refused",
          "[base][env]") {
  namespace fs = std::filesystem;
  const auto tmp = ktune::test::scratch_dir("env-fallback");
  const fs::path mine = tmp / ("ktune-cache-" + std::to_string(::geteuid()));
  CHECK(fallback_in(tmp) == mine);
  struct stat st {};
  REQUIRE(::lstat(mine.c_str(), &st) == 0);
  CHECK(S_ISDIR(st.st_mode));
  CHECK((st.st_mode & 0777) == 0700);  // made so whatever the umask
  CHECK(fallback_in(tmp) == mine);     // and taken again as it is

  // A folder other users may write to could hold their code, which emulation runs would load.
  fs::permissions(mine, fs::perms::all);
  expect_fallback_refused(tmp, "may be written by other users (mode 777)");
  fs::permissions(mine, fs::perms::owner_all | fs::perms::group_write);
  expect_fallback_refused(tmp, "may be written by other users (mode 720)");
  fs::remove(mine);
  // A link put there in its place, to a folder of another's.
  fs::create_directory(tmp / "elsewhere");
  fs::create_directory_symlink(tmp / "elsewhere", mine);
  expect_fallback_refused(tmp, "is no folder");
  fs::remove(mine);
  if (::geteuid() == 0) {  // only root can make a folder another user owns
    fs::create_directory(mine);
    fs::permissions(mine, fs::perms::owner_all);
    REQUIRE(::chown(mine.c_str(), 65534, 65534) == 0);
    expect_fallback_refused(tmp, "belongs to another user (uid 65534, not 0)");
  }
}

TEST_CASE("A relative XDG_CACHE_HOME is ignored, and a TMPDIR that is no folder said as such", "[base][env]") {
  namespace fs = std::filesystem;
  Variable cache("KTUNE_CACHE_DIR", nullptr);
  {
    // The XDG Base Directory spec: relative paths are invalid and ignored; it would put a cache where a job runs.
    Variable xdg("XDG_CACHE_HOME", "relcache"), home("HOME", "/home/someone");
    CHECK(ktune::env::cache_dir() == fs::path("/home/someone/.cache/ktune"));
  }
  {
    Variable xdg("XDG_CACHE_HOME", "/var/cache/someone"), home("HOME", "/home/someone");
    CHECK(ktune::env::cache_dir() == fs::path("/var/cache/someone/ktune"));
  }
  const auto missing = ktune::test::scratch_dir("env-tmpdir") / "missing";
  Variable xdg("XDG_CACHE_HOME", "relcache"), home("HOME", nullptr), tmpdir("TMPDIR", missing.c_str());
  try {
    ktune::env::cache_dir();
    FAIL("accepted");
  } catch (const ktune::Error& e) {
    CHECK(e.kind() == ktune::ErrorKind::kInvalidInput);
    CHECK_THAT(e.what(), Catch::StartsWith("no folder for the cache: no KTUNE_CACHE_DIR, absolute XDG_CACHE_HOME or "
                                           "HOME, and TMPDIR=" + missing.string() + " is no folder (") &&
                             Catch::EndsWith("); set KTUNE_CACHE_DIR"));
  }
  CHECK_FALSE(fs::exists(missing));
}

TEST_CASE("A file where the cache folder goes is named with the variable that put it there", "[base][env]") {
  namespace fs = std::filesystem;
  const auto dir = ktune::test::scratch_dir("env-cache-file");
  const std::string file = (dir / "file").string(), home = (dir / "home").string(), xdg = dir.string();
  fs::create_directories(dir / "home/.cache");
  for (const auto& f : {dir / "file", dir / "home/.cache/ktune", dir / "ktune"}) std::ofstream(f) << "x";
  struct Case {
    const char *cache, *xdg, *home, *from;
    std::string named;
  };
  for (const Case& c : {Case{file.c_str(), nullptr, nullptr, "KTUNE_CACHE_DIR", file},
                        Case{nullptr, xdg.c_str(), nullptr, "XDG_CACHE_HOME", (dir / "ktune").string()},
                        Case{nullptr, nullptr, home.c_str(), "HOME", (dir / "home/.cache/ktune").string()}}) {
    INFO(c.from);
    Variable cache("KTUNE_CACHE_DIR", c.cache), x("XDG_CACHE_HOME", c.xdg), h("HOME", c.home);
    CHECK_THROWS_WITH(ktune::env::cache_dir(), "the cache folder " + c.named + " (from " + c.from +
                                                   ") is a file, not a folder; set KTUNE_CACHE_DIR to a folder "
                                                   "ktune may write");
  }
  {  // a folder under a file can never be made
    Variable under("KTUNE_CACHE_DIR", (dir / "file/sub/cache").c_str());
    CHECK_THROWS_WITH(ktune::env::cache_dir(), "the cache folder " + (dir / "file/sub/cache").string() +
                                                   " (from KTUNE_CACHE_DIR) is under " + file +
                                                   ", a file, not a folder; set KTUNE_CACHE_DIR to a folder ktune "
                                                   "may write");
  }
  Variable cache("KTUNE_CACHE_DIR", xdg.c_str());
  CHECK(ktune::env::cache_dir() == dir);  // a folder is taken
}

TEST_CASE("KTUNE_NO_DEVICE hides the GPUs unless unset, empty, 0, false, no or off", "[base][env]") {
  for (const char* shown : {"", "0", "false", "FALSE", "no", "off", "Off"}) {
    INFO(shown);
    Variable v("KTUNE_NO_DEVICE", shown);
    CHECK_FALSE(ktune::env::no_device());
  }
  for (const char* hidden : {"1", "true", "yes", "on"}) {
    INFO(hidden);
    Variable v("KTUNE_NO_DEVICE", hidden);
    CHECK(ktune::env::no_device());
  }
}

}  // namespace base_env_test
