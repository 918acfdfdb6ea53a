// Files that lose nothing: atomic writes (temp, fsync, rename) and an
// advisory lock that serialises writers between processes.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace ktune {

/// Whole file as bytes; throws Error(kIo) naming the path when unreadable.
std::string read_file(const std::filesystem::path& path);

/// Why `path` is no file to read, said after its name ("" where it is one): "does not exist", "is a folder, not
/// a file", "is not a regular file (a device, pipe or socket)".
std::string not_a_file(const std::filesystem::path& path);

/// The file a write to `path` replaces, after the one policy every command
/// that writes a file follows: symlinks are resolved to their final target
/// (so the target is written and its lock taken, never the link replaced),
/// and a missing parent folder is created when the file is written, not
/// now (a run refused after this check leaves no folder behind). Throws
/// kInvalidInput, one line naming `what` (e.g. "cache file", "--json-out")
/// and the path, when the target is a directory or another non-regular
/// file, or a name ending in '/', or holds a name longer than NAME_MAX, is
/// read-only, or its folder (or the nearest one that exists) cannot be
/// written (a file is made there and removed at once to ask); the message
/// ends with `advice`, what to do instead.
/// Writes nothing else.
inline constexpr std::string_view kWritableAdvice = "give a writable file path";
std::filesystem::path writable_target(const std::filesystem::path& path, std::string_view what,
                                      std::string_view advice = kWritableAdvice);

/// writable_target's target with its missing folders made: for a writer that
/// opens the file itself next (a log appended to line by line).
std::filesystem::path open_target(const std::filesystem::path& path, std::string_view what);

/// Writes `bytes` to a temp file beside writable_target(path) (its folder
/// asked by the temp file itself, not by a probe first), fsyncs it,
/// renames it over the target and fsyncs the directory: readers see the old
/// or the new file, never a mix, even if the writer is killed. A replaced
/// file keeps its permission bits (and owner, where allowed).
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

/// Whether no process has the id `pid` (> 0) now: the writer a file's name
/// records was killed before it cleaned up.
bool process_gone(int pid);

/// Whether `name` is the temp file of a write_file_atomic or AtomicFile
/// (.NAME.tmp.PID.N) whose process is still running: what a cleaner leaves.
bool temp_file_in_progress(const std::string& name);

/// write_file_atomic in pieces, for a file too large to hold in memory at
/// once: the temp file is made at construction, `append` writes to it, and
/// `commit` fsyncs it and renames it over the target. Destroyed without a
/// commit (an exception on the way), it removes the temp file and the
/// target is untouched. Throws kIo naming the path when a write fails.
/// Temp files beside the target that a writer killed outright left (their
/// process is gone) are removed at construction, so a large file written
/// over and over (a checkpoint) never leaves a second copy behind for long.
class AtomicFile {
 public:
  explicit AtomicFile(const std::filesystem::path& path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void append(std::string_view bytes);
  void commit();

 private:
  std::filesystem::path target_, tmp_;
  int fd_ = -1;
};

/// A file mapped read-only into memory: its pages are read as they are
/// touched, so a file larger than memory costs none up front. Throws kIo
/// naming the path when it cannot be opened or mapped.
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::string_view bytes() const { return {data_, size_}; }
  /// Throws kIo naming the file when it now holds fewer bytes than were
  /// mapped (rewritten in place while it is read: its pages past the new end
  /// would end the process with SIGBUS when touched), or was written to since
  /// it was opened (its modification time changed: rewritten in place as
  /// long, what it holds is no longer what its reader checked). One replaced
  /// whole (a new file renamed over it) is neither: the mapping holds the old.
  /// Callers check before they read a part of it.
  void require_whole() const;

 private:
  std::filesystem::path path_;
  int fd_ = -1;  // kept open: fstat says whether the file was cut since
  const char* data_ = nullptr;
  std::size_t size_ = 0;
  std::int64_t modified_ns_ = 0;  // its modification time when opened
};

/// The lock file of `target`: NAME.lock beside it, where NAME is shortened
/// (its start and a hash of the whole) if NAME.lock would be too long a name,
/// so any file may be locked. Temp files beside a target are fitted alike.
std::filesystem::path lock_path(const std::filesystem::path& target);

/// Whether the lock file `lock` (a FileLock's) is held now, by any process:
/// a cleaner leaves it, and the file it guards (a session log being written).
bool lock_held(const std::filesystem::path& lock);

/// Removes the file `path` unless a process holds its lock (lock_path(path)), as a tuning session holds its
/// log's: the lock is taken at once, else the file is left and false returned, and the file is removed while
/// it is held, so a writer that takes the lock after the look finds it held (and waits, or is refused) and
/// never writes a file that is then removed under it. `while_held` runs between the two (tests use it).
/// A file already gone counts as removed; throws kIo when it cannot be removed or locked.
bool remove_unless_locked(const std::filesystem::path& path, const std::function<void()>& while_held = {});

/// Exclusive advisory lock (flock) on `path` (created if missing, and its
/// missing folders with it), held for the object's lifetime. Blocks until
/// acquired; or, given `busy` (what holds the file, for the message), throws
/// kInvalidInput at once when another process holds it: a file one run
/// writes for its whole length (a session log, a training run's metrics) is
/// not written by two, also where the run makes its folder. The folders it
/// made are removed with the lock where they are still empty, so a run
/// refused later leaves none behind. The lock file is removed when
/// the lock is released, so none is left beside the file it guards: the
/// holder unlinks it while still holding it, and a locker re-checks, once
/// it holds its lock, that the file it opened is still the one at `path`
/// (else it was unlinked meanwhile, and it opens the path again). A writer
/// killed while holding it leaves the file, which the next one removes.
class FileLock {
 public:
  explicit FileLock(const std::filesystem::path& path, std::string_view busy = {});
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  std::vector<std::filesystem::path> made_;  ///< the folders this lock made, the innermost first
};

}  // namespace ktune
