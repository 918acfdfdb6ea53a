// The one policy for files ktune writes: links written through, directories
// and read-only files refused, missing folders created, modes kept, a killed
// writer's temp file removed by the next.
#include "base/files.hpp"

#include <catch2/catch.hpp>
#include <fstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/error.hpp"
#include "support.hpp"

namespace base_files_test {

namespace fs = std::filesystem;

namespace {
void expect_refused(const fs::path& path, const std::string& why) {
  try {
    ktune::writable_target(path, "--json-out");
    FAIL("expected " << path << " to be refused");
  } catch (const ktune::Error& e) {
    CHECK(e.kind() == ktune::ErrorKind::kInvalidInput);
    CHECK_THAT(e.what(), Catch::Contains("--json-out") && Catch::Contains(why));
    CHECK(std::string(e.what()).find('\n') == std::string::npos);
  }
}
}  // namespace

TEST_CASE("writable_target: directories, read-only files and unmakeable folders are refused", "[base][files]") {
  const auto dir = ktune::test::scratch_dir("files-refused");
  expect_refused(dir, "is a directory");
  ktune::write_file_atomic(dir / "ro.json", "old");
  fs::permissions(dir / "ro.json", fs::perms::owner_read | fs::perms::group_read);
  expect_refused(dir / "ro.json", "read-only");
  CHECK_THROWS_AS(ktune::write_file_atomic(dir / "ro.json", "new"), ktune::Error);
  CHECK(ktune::read_file(dir / "ro.json") == "old");
  ktune::write_file_atomic(dir / "plain", "x");
  expect_refused(dir / "plain" / "sub" / "out.json", "cannot create folder");
  CHECK(fs::is_empty(dir / "ro.json") == false);
  // A name ending in '/' is a folder's, existing or not: refused before anything is made, by both checks.
  expect_refused(fs::path((dir / "newdir").string() + "/"), "it names a folder (it ends with '/')");
  CHECK_THROWS_WITH(ktune::open_target(fs::path((dir / "logs").string() + "/"), "--metrics"),
                    Catch::Contains("cannot write --metrics") && Catch::Contains("it names a folder"));
  CHECK_FALSE(fs::exists(dir / "newdir"));
  CHECK_FALSE(fs::exists(dir / "logs"));
}

TEST_CASE("writable_target: a missing folder is made when the file is written, links are written through",
          "[base][files]") {
  const auto dir = ktune::test::scratch_dir("files-links");
  const auto deep = dir / "a" / "b" / "out.json";
  CHECK(ktune::writable_target(deep, "--json-out") == deep);
  CHECK_FALSE(fs::exists(dir / "a"));  // asked, not made: a run refused after the check leaves nothing
  ktune::write_file_atomic(deep, "x");
  CHECK(ktune::read_file(deep) == "x");
  CHECK(ktune::open_target(dir / "c" / "log.jsonl", "--log") == dir / "c" / "log.jsonl");
  CHECK(fs::is_directory(dir / "c"));  // made for a writer that opens the file itself

  ktune::write_file_atomic(dir / "real.json", "one");
  fs::create_symlink("real.json", dir / "link.json");
  CHECK(ktune::writable_target(dir / "link.json", "--json-out") == dir / "real.json");
  ktune::write_file_atomic(dir / "link.json", "two");
  CHECK(fs::is_symlink(dir / "link.json"));  // the link is kept, its target written
  CHECK(ktune::read_file(dir / "real.json") == "two");
}

TEST_CASE("write_file_atomic keeps the permission bits of the file it replaces", "[base][files]") {
  const auto dir = ktune::test::scratch_dir("files-mode");
  ktune::write_file_atomic(dir / "f", "one");
  fs::permissions(dir / "f", fs::perms::owner_read | fs::perms::owner_write);
  ktune::write_file_atomic(dir / "f", "two");
  CHECK((fs::status(dir / "f").permissions() & fs::perms::all) == (fs::perms::owner_read | fs::perms::owner_write));
}

TEST_CASE("a temp file a killed writer left beside its target is removed by the next writer, a live one's kept",
          "[base][files]") {
  const auto dir = ktune::test::scratch_dir("files-orphans");
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  ::waitpid(child, nullptr, 0);  // gone: the PID of a writer killed outright
  const fs::path orphan = dir / (".run.ckpt.tmp." + std::to_string(child) + ".0");
  const fs::path live = dir / (".run.ckpt.tmp." + std::to_string(::getpid()) + ".999");
  const fs::path other = dir / (".other.ckpt.tmp." + std::to_string(child) + ".0");
  for (const auto& p : {orphan, live, other}) std::ofstream(p) << "partial";
  ktune::write_file_atomic(dir / "run.ckpt", "whole");
  CHECK_FALSE(fs::exists(orphan));
  CHECK(fs::exists(live));   // a writer still running (this one)
  CHECK(fs::exists(other));  // another target's
  CHECK(ktune::read_file(dir / "run.ckpt") == "whole");
}

TEST_CASE("FileLock: a lock in a folder not there yet makes it and holds, and takes it away if left empty",
          "[base][files]") {
  const auto dir = ktune::test::scratch_dir("files-lock-folder");
  const auto lock = dir / "new" / "deeper" / "run.ckpt.lock";
  {
    const ktune::FileLock first(lock, "--checkpoint run.ckpt");
    CHECK(fs::exists(lock));
    // A second run that makes the same folder at the same time is refused, as where the folder was there.
    CHECK_THROWS_WITH(ktune::FileLock(lock, "--checkpoint run.ckpt"),
                      Catch::Contains("--checkpoint run.ckpt is being written by another ktune process"));
    CHECK(fs::exists(lock));
  }
  CHECK_FALSE(fs::exists(dir / "new"));  // nothing was written there: the folders go with the lock
  {
    const ktune::FileLock first(lock, "--checkpoint run.ckpt");
    ktune::write_file_atomic(dir / "new" / "deeper" / "run.ckpt", "x");
  }
  CHECK(ktune::read_file(dir / "new" / "deeper" / "run.ckpt") == "x");
  CHECK_FALSE(fs::exists(lock));
}

TEST_CASE("remove_unless_locked leaves a file whose lock is held, and removes a free one under its lock",
          "[base][files]") {
  const auto dir = ktune::test::scratch_dir("files-remove-unless-locked");
  const auto log = dir / "run.log";
  std::ofstream(log) << "x";
  {
    const ktune::FileLock session(ktune::lock_path(log), "session log");  // a session writing it
    CHECK_FALSE(ktune::remove_unless_locked(log));
    CHECK(fs::exists(log));
  }
  // A session that starts after the look finds the lock held (refused, or it waits), so the log it would begin
  // anew is never removed under it.
  bool refused = false;
  CHECK(ktune::remove_unless_locked(log, [&] {
    try {
      const ktune::FileLock session(ktune::lock_path(log), "session log");
      std::ofstream(log) << "a new session's header\n";
    } catch (const ktune::Error& e) {
      refused = e.kind() == ktune::ErrorKind::kInvalidInput;
    }
  }));
  CHECK(refused);
  CHECK_FALSE(fs::exists(log));
  CHECK_FALSE(fs::exists(ktune::lock_path(log)));
  CHECK(ktune::remove_unless_locked(log));  // gone already: nothing to do
}

TEST_CASE("Any name a file may have is written and locked, a longer one refused before the work", "[base][files]") {
  const auto dir = ktune::test::scratch_dir("files-long-names");
  // 255 bytes, the most a name may have: NAME.lock and .NAME.tmp.PID.N would be longer, and are fitted.
  const auto longest = dir / (std::string(250, 'w') + ".ckpt");
  CHECK(ktune::writable_target(longest, "--checkpoint") == longest);
  const auto lock = ktune::lock_path(longest);
  CHECK(lock.parent_path() == dir);
  CHECK(lock.filename().string().size() <= 255);
  CHECK_THAT(lock.filename().string(), Catch::StartsWith(std::string(200, 'w')) && Catch::EndsWith(".lock"));
  CHECK(ktune::lock_path(dir / (std::string(251, 'v') + ".ckpt")) != lock);  // another name, another lock
  {
    const ktune::FileLock held(lock, "--checkpoint");
    ktune::write_file_atomic(longest, "one");
    ktune::write_file_atomic(longest, "two");
  }
  CHECK(ktune::read_file(longest) == "two");
  CHECK(ktune::lock_path(dir / "run.ckpt") == dir / "run.ckpt.lock");  // a short name's as ever
  // A byte longer fails whatever is written: said before the work, naming the limit.
  expect_refused(dir / (std::string(256, 'w')), "a name in it is 256 bytes long, and the file system takes 255");
  expect_refused(dir / std::string(256, 'd') / "out.json", "a name in it is 256 bytes long");
}

}  // namespace base_files_test
