// GPU marks: each process that uses a GPU sees the other ktune processes on
// it, and no longer sees one that ended or was killed; a tuning session's
// workers (one root) are not each other's neighbours. Processes are forked
// children here; no GPU is needed.
#include "tuner/cuda/gpu_marks.hpp"

#include <fmt/format.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>

#include "base/env.hpp"
#include "base/files.hpp"
#include "support.hpp"
#include "tuner/cuda/gpu_neighbour.hpp"
#include "tuner/run/runner.hpp"

namespace tuner_cuda_gpu_marks_test {

using namespace ktune;
using namespace ktune::tuner;
namespace fs = std::filesystem;

namespace {

constexpr const char* kUuid = "GPU-0a1b2c3d-0000-1111-2222-333344445555";

/// This user's folder of marks of the GPU kUuid under `dir`.
fs::path own_marks(const fs::path& dir) { return dir / kUuid / std::to_string(::geteuid()); }

std::size_t marks_in(const fs::path& folder) {
  std::size_t n = 0;
  for (const auto& e : fs::directory_iterator(folder)) n += e.path().extension() == ".lock";
  return n;
}

}  // namespace

TEST_CASE("GPU marks: a process sees another ktune process on its GPU, by pid and command, until it is killed",
          "[gpu-marks]") {
  const fs::path dir = test::scratch_dir("gpu-marks-neighbour");
  const GpuMark mine(dir, kUuid);
  CHECK(mine.others().empty());
  CHECK(marks_in(own_marks(dir)) == 1);
  test::GpuNeighbour other(dir, kUuid, true);
  const auto seen = mine.others();
  REQUIRE(seen.size() == 1);
  CHECK_THAT(seen[0], Catch::StartsWith(fmt::format("pid {} (", other.pid)));
  CHECK_THAT(seen[0], Catch::Contains("ktune_tests_cpu"));  // the command line, as /proc has it
  const auto all = others_seen();
  CHECK(std::find(all.begin(), all.end(), seen[0]) != all.end());
  // What `ktune devices` lists: every process marked on the GPU, this one too.
  const auto marked = marked_on(dir, kUuid);
  CHECK(marked.size() == 2);
  CHECK(std::find(marked.begin(), marked.end(), seen[0]) != marked.end());
  // Another GPU is not this one.
  const GpuMark elsewhere(dir, "GPU-ffffffff-0000-1111-2222-333344445555");
  CHECK(elsewhere.others().empty());
  // Killed: its file is left, unlocked; the next look drops it and removes the file.
  other.kill();
  CHECK(marks_in(own_marks(dir)) == 2);
  CHECK(mine.others().empty());
  CHECK(marks_in(own_marks(dir)) == 1);
  CHECK(marked_on(dir, kUuid).size() == 1);
  CHECK(marked_on({}, kUuid).empty());
}

TEST_CASE("GPU marks: the processes of one session (its forked workers, one root) are not each other's neighbours, "
          "and a killed worker's mark goes",
          "[gpu-marks]") {
  const fs::path dir = test::scratch_dir("gpu-marks-workers");
  const GpuMark mine(dir, kUuid);
  test::GpuNeighbour worker(dir, kUuid, false);
  CHECK(marks_in(own_marks(dir)) == 2);
  CHECK(mine.others().empty());
  CHECK(marks_in(own_marks(dir)) == 2);  // a live worker's mark stays
  worker.kill();                      // as a worker past its time-out is
  CHECK(mine.others().empty());
  CHECK(marks_in(own_marks(dir)) == 1);
}

TEST_CASE("GPU marks: a child forked while a mark is held leaves it to its parent, whatever the child does with its "
          "copy",
          "[gpu-marks]") {
  const fs::path dir = test::scratch_dir("gpu-marks-fork");
  auto mark = std::make_unique<GpuMark>(dir, kUuid);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    mark.reset();  // the child's copy destroyed, as a child that unwinds its stack would
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(marks_in(own_marks(dir)) == 1);
  {
    const GpuMark observer(dir, kUuid, "1x0");  // another session: sees the parent's mark, still held
    const auto seen = observer.others();
    REQUIRE(seen.size() == 1);
    CHECK_THAT(seen[0], Catch::StartsWith(fmt::format("pid {} (", ::getpid())));
  }
  // A child forked with no mark makes its own session: its marks are the parent's neighbours.
  CHECK(process_root() != "");
  test::GpuNeighbour other(dir, kUuid, true);
  CHECK(mark->others().size() == 1);
}

TEST_CASE("GPU marks: a process's marks of one GPU share one file, removed with the last, and a folder that cannot "
          "be written makes none and no error",
          "[gpu-marks]") {
  const fs::path dir = test::scratch_dir("gpu-marks-own");
  {
    const GpuMark first(dir, kUuid);
    {
      const GpuMark second(dir, kUuid);  // a second backend of the same process: no wait on its own lock
      CHECK(marks_in(own_marks(dir)) == 1);
      CHECK(second.others().empty());
    }
    CHECK(marks_in(own_marks(dir)) == 1);
  }
  CHECK(marks_in(own_marks(dir)) == 0);
  std::ofstream(dir / "a-file") << "x";
  const GpuMark none(dir / "a-file", kUuid);  // its folder would be inside a file
  CHECK(none.others().empty());
  const GpuMark nowhere({}, kUuid);
  CHECK(nowhere.others().empty());
}

TEST_CASE("GPU marks: every process on the machine marks in one folder, whatever its cache folder, made writable "
          "by all as /tmp is",
          "[gpu-marks]") {
  const fs::path dir = test::scratch_dir("gpu-marks-shared") / "marks";
  {
    const test::ScopedEnv unset("KTUNE_GPU_MARK_DIR", nullptr);
    const test::ScopedEnv cache("KTUNE_CACHE_DIR", (dir.parent_path() / "cache-a").c_str());
    const fs::path a = env::gpu_mark_dir();
    const test::ScopedEnv other_cache("KTUNE_CACHE_DIR", (dir.parent_path() / "cache-b").c_str());
    CHECK(env::gpu_mark_dir() == a);  // two cache folders, one GPU: they see each other
    CHECK(a.filename() == "ktune-gpus");
  }
  const test::ScopedEnv marks("KTUNE_GPU_MARK_DIR", dir.c_str());
  REQUIRE(env::gpu_mark_dir() == dir);
  const GpuMark mine(env::gpu_mark_dir(), kUuid);
  const auto everyone = fs::perms::all | fs::perms::sticky_bit;  // another user's process marks here too
  CHECK(fs::status(dir).permissions() == everyone);
  CHECK(fs::status(dir / kUuid).permissions() == everyone);
  // Each user's marks in a folder of its own, which the others read and cannot write.
  const auto readable = fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                        fs::perms::others_read | fs::perms::others_exec;
  CHECK(fs::status(own_marks(dir)).permissions() == readable);
  CHECK(marks_in(own_marks(dir)) == 1);
  // A folder someone else made is left as it is.
  const fs::path own = dir.parent_path() / "private";
  fs::create_directories(own / kUuid);
  fs::permissions(own, fs::perms::owner_all);
  fs::permissions(own / kUuid, fs::perms::owner_all);
  const GpuMark kept(own, kUuid);
  CHECK(fs::status(own).permissions() == fs::perms::owner_all);
  CHECK(marks_in(own_marks(own)) == 1);
}

TEST_CASE("GPU marks: in the folders all may write, a link put where a mark or a folder goes redirects "
          "nothing, and a mark is readable by all under any umask",
          "[gpu-marks]") {
  const fs::path dir = test::scratch_dir("gpu-marks-links");
  const fs::path victim = dir / "private.txt";
  std::ofstream(victim) << "mine";
  fs::permissions(victim, fs::perms::owner_read | fs::perms::owner_write);
  const auto unchanged = [&] {
    const auto private_mode = fs::perms::owner_read | fs::perms::owner_write;
    return ktune::read_file(victim) == "mine" && fs::status(victim).permissions() == private_mode;
  };
  // A link where this user's folder goes, or where a GPU's folder goes (both in folders every user may write):
  // no mark made inside the folder it points to.
  fs::create_directories(dir / "elsewhere");
  fs::create_directories(dir / "marks" / kUuid);
  fs::create_directory_symlink(dir / "elsewhere", own_marks(dir / "marks"));
  {
    const GpuMark mark(dir / "marks", kUuid);
    CHECK(fs::is_empty(dir / "elsewhere"));
  }
  const std::string other_gpu = "GPU-ffffffff-0000-1111-2222-333344445555";
  fs::create_directory_symlink(dir / "elsewhere", dir / "marks" / other_gpu);
  {
    const GpuMark mark(dir / "marks", other_gpu);
    CHECK(fs::is_empty(dir / "elsewhere"));
  }
  // A link at the mark's own name: the file it points to is untouched, and no mark is made.
  fs::create_directories(own_marks(dir / "named"));
  fs::create_symlink(victim, own_marks(dir / "named") / fmt::format("planted-{}.lock", ::getpid()));
  {
    const GpuMark mark(dir / "named", kUuid, "planted");
    CHECK(unchanged());
    CHECK(marked_on(dir / "named", kUuid).empty());
  }
  CHECK(unchanged());
  // A user's folder that another user may write is neither marked in nor read: a file there could be anyone's.
  fs::create_directories(own_marks(dir / "loose"));
  fs::permissions(own_marks(dir / "loose"), fs::perms::all);
  {
    const GpuMark loose(dir / "loose", kUuid);
    CHECK(marks_in(own_marks(dir / "loose")) == 0);
    const int fd = ::open((own_marks(dir / "loose") / "other-1.lock").c_str(), O_RDWR | O_CREAT, 0644);
    REQUIRE(fd >= 0);
    REQUIRE(::flock(fd, LOCK_EX) == 0);
    REQUIRE(::write(fd, "pid 1 (x)\n", 10) == 10);
    CHECK(marked_on(dir / "loose", kUuid).empty());
    ::close(fd);
  }
  // Another user's umask of 077 still leaves the mark readable by all: their looks must read its line.
  const mode_t was = ::umask(077);
  {
    const GpuMark mark(dir / "open", kUuid, "umask");
    const fs::path file = own_marks(dir / "open") / fmt::format("umask-{}.lock", ::getpid());
    REQUIRE(fs::exists(file));
    CHECK((fs::status(file).permissions() & fs::perms::all) ==
          (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read));
  }
  ::umask(was);
  // A mark another user wrote is printed: its control characters (a terminal's escapes) are not.
  {
    const fs::path folder = own_marks(dir / "open");
    const int fd = ::open((folder / "other-1.lock").c_str(), O_RDWR | O_CREAT, 0644);
    REQUIRE(fd >= 0);
    REQUIRE(::flock(fd, LOCK_EX) == 0);
    const std::string line = "pid 1 (\x1b]0;owned\x07x\r\xc2\x9b)\n";  // ESC, BEL, CR, and U+009B (8-bit CSI)
    REQUIRE(::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()));
    const auto seen = marked_on(dir / "open", kUuid);
    ::close(fd);
    REQUIRE(seen.size() == 1);
    CHECK(seen[0] == "pid 1 (?]0;owned?x??\?)");  // \? : no trigraph
  }
  // A relative KTUNE_GPU_MARK_DIR would differ by the folder each process starts in: ignored.
  const test::ScopedEnv relative("KTUNE_GPU_MARK_DIR", "marks-here");
  CHECK(env::gpu_mark_dir().is_absolute());
}

TEST_CASE("A measurement keeps the processes that shared its GPU through the worker's JSON", "[gpu-marks]") {
  RunResult r;
  r.ok = true;
  r.timing = summarize({1.0, 2.0, 3.0});
  r.timing->method = "cuda events";
  CHECK_FALSE(to_json(r).dump().find("shared_with") != std::string::npos);  // absent when alone
  r.timing->shared_with = {"pid 7 (ktune tune --family swiglu_fwd)"};
  const RunResult back = run_result_from_json(to_json(r));
  REQUIRE(back.timing);
  CHECK(back.timing->shared_with == r.timing->shared_with);
}

}  // namespace tuner_cuda_gpu_marks_test
