// Files that lose nothing: atomic writes (temp, fsync, rename) and an
// advisory lock that serialises writers between processes.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>

namespace ktune {

/// Whole file as bytes; throws Error(kIo) naming the path when unreadable.
std::string read_file(const std::filesystem::path& path);

/// Writes `bytes` to a temp file beside `path`, fsyncs it, renames it over
/// `path` and fsyncs the directory: readers see the old or the new file, never
/// a mix, even if the writer is killed. Creates parent directories.
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

/// Exclusive advisory lock (flock) on `path` (created if missing), held for the
/// object's lifetime. Blocks until acquired.
class FileLock {
 public:
  explicit FileLock(const std::filesystem::path& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace ktune
