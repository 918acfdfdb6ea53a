#include "base/files.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <limits.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "base/hash.hpp"

namespace ktune {
namespace fs = std::filesystem;

namespace {
[[noreturn]] void io_error(const std::string& what, const fs::path& path) {
  throw_error(ErrorKind::kIo, what + " " + path.string() + ": " + std::strerror(errno));
}
}  // namespace

namespace {

// Bytes a temp file's name adds to its target's: ".NAME.tmp.PID.N".
constexpr std::size_t kTempNameExtra = 32;

// `name`, or where it and `extra` more bytes would pass NAME_MAX (a lock's
// ".lock", a temp file's parts), its start and a hash of the whole: a name
// made from any name a file may have is one too.
std::string fitted_name(const std::string& name, std::size_t extra) {
  if (name.size() + extra <= NAME_MAX) return name;
  const std::string hash = hash_hex(name).substr(0, 16);
  std::size_t keep = NAME_MAX - extra - hash.size() - 1;
  while (keep > 0 && (static_cast<unsigned char>(name[keep]) & 0xC0) == 0x80) --keep;  // not within a character
  return name.substr(0, keep) + "~" + hash;
}

}  // namespace

fs::path lock_path(const fs::path& target) {
  return target.parent_path() / (fitted_name(target.filename().string(), 5) + ".lock");
}

std::string not_a_file(const fs::path& path) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (!fs::exists(status)) return "does not exist";
  if (fs::is_directory(status)) return "is a folder, not a file";
  return fs::is_regular_file(status) ? "" : "is not a regular file (a device, pipe or socket)";
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) io_error("cannot read", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {

// Whether `folder` is a process's table of open files (/proc/self/fd, /dev/fd, /proc/PID/task/TID/fd): a link
// there is a descriptor (/dev/stdout is /proc/self/fd/1), whatever file it has open.
bool descriptor_folder(const fs::path& folder) {
  std::error_code ec;
  const fs::path real = fs::canonical(folder, ec);
  if (ec || real.filename() != "fd") return false;
  const fs::path owner = real.parent_path();  // /proc/PID or /proc/PID/task/TID
  const std::string id = owner.filename().string();
  return !id.empty() && id.find_first_not_of("0123456789") == std::string::npos &&
         (owner.parent_path() == "/proc" || owner.parent_path().filename() == "task");
}

// writable_target; with `probe_folder` false (open_target) the missing
// folders are made and the folder is asked with access() only, for a writer
// that makes its own file there next (AtomicFile's temp file, a log), which
// fails as a probe would.
fs::path resolve_target(const fs::path& path, std::string_view what, bool probe_folder,
                        std::string_view advice = kWritableAdvice) {
  auto refuse = [&](const fs::path& p, const std::string& why) {
    throw_error(ErrorKind::kInvalidInput, fmt::format("cannot write {} {}: {}; {}", what, p.string(), why, advice));
  };
  KTUNE_REQUIRE(!path.empty(), fmt::format("{} must not be empty; {}", what, advice));
  // "out/" names a folder whatever is there: a file cannot be written by that name.
  if (!path.has_filename()) refuse(path, "it names a folder (it ends with '/')");
  // A name no file may have fails its write after the work: refused now (a lock or temp file's name is fitted).
  for (const auto& part : path)
    if (part.string().size() > NAME_MAX)
      refuse(path, fmt::format("a name in it is {} bytes long, and the file system takes {} at most",
                               part.string().size(), NAME_MAX));
  std::error_code ec;
  // Where the links end, asked first: a link to what is no file has no path to follow (/dev/stdout, a pipe's:
  // /proc/self/fd/1 reads "pipe:[123]").
  if (const auto end = fs::status(path, ec); fs::exists(end) && !fs::is_regular_file(end) && !fs::is_directory(end))
    refuse(path, "it is not a regular file");
  // Follow the chain of links, each relative to the folder that holds it.
  fs::path target = path;
  for (int hops = 0; fs::is_symlink(fs::symlink_status(target, ec)); ++hops) {
    if (hops == 40) refuse(path, "too many levels of symbolic links");
    // A descriptor's file (stdout sent to a file: `--json-out /dev/stdout >> run.log`) would be replaced by the
    // write, its content lost, and what the command prints with it.
    if (descriptor_folder(target.parent_path()))
      refuse(path, "it names an open file descriptor (standard output, or another), not a file");
    const fs::path next = fs::read_symlink(target, ec);
    if (ec) refuse(path, ec.message());
    target = next.is_absolute() ? next : target.parent_path() / next;
  }
  const auto status = fs::status(target, ec);
  if (fs::exists(status)) {
    if (fs::is_directory(status)) refuse(target, "it is a directory");
    if (!fs::is_regular_file(status)) refuse(target, "it is not a regular file");
    // Root passes access(W_OK) on any file: a file without write bits is read-only to ktune too.
    constexpr auto kAnyWrite = fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write;
    if (::access(target.c_str(), W_OK) != 0 || (status.permissions() & kAnyWrite) == fs::perms::none)
      refuse(target, "the file is read-only");
  }
  const fs::path folder = target.has_parent_path() ? target.parent_path() : fs::path(".");
  if (!probe_folder) {
    fs::create_directories(folder, ec);
    if (ec) refuse(target, fmt::format("cannot create folder {}: {}", folder.string(), ec.message()));
    if (::access(folder.c_str(), W_OK | X_OK) != 0)
      refuse(target, fmt::format("folder {}: {}", folder.string(), std::strerror(errno)));
    return target;
  }
  // Asked before the work: the missing folders are made when the file is
  // written, so a run refused later leaves none behind; the nearest one
  // that exists is asked instead (folders can be made there).
  fs::path dir = folder;
  while (!fs::exists(fs::symlink_status(dir, ec)) && dir.has_parent_path() && dir.parent_path() != dir)
    dir = dir.parent_path();
  if (!fs::exists(fs::symlink_status(dir, ec))) dir = ".";
  if (!fs::is_directory(dir, ec))
    refuse(target, fmt::format("cannot create folder {}: {} is not a folder", folder.string(), dir.string()));
  // A file made and removed there: access(W_OK) answers yes to root in any
  // folder, even one where nothing can be made (/proc, a read-only mount).
  static std::atomic<unsigned> probes{0};
  const fs::path probe = dir / fmt::format(".ktune-probe.{}.{}", ::getpid(), probes++);
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) refuse(target, fmt::format("cannot make a file in folder {}: {}", dir.string(), std::strerror(errno)));
  ::close(fd);
  ::unlink(probe.c_str());
  return target;
}

}  // namespace

fs::path writable_target(const fs::path& path, std::string_view what, std::string_view advice) {
  return resolve_target(path, what, true, advice);
}

fs::path open_target(const fs::path& path, std::string_view what) { return resolve_target(path, what, false); }

namespace {

// The process that writes the temp file `file` (.NAME.tmp.PID.N), else 0.
pid_t temp_file_writer(const std::string& file) {
  const auto at = file.rfind(".tmp.");
  if (file.empty() || file[0] != '.' || at == std::string::npos || at == 0) return 0;
  const std::string rest = file.substr(at + 5);
  const auto dot = rest.find('.');
  constexpr const char* kDigits = "0123456789";
  if (dot == 0 || dot == std::string::npos || dot > 9 || rest.find_first_not_of(kDigits) != dot ||
      rest.find_first_not_of(kDigits, dot + 1) != std::string::npos)
    return 0;
  return static_cast<pid_t>(std::stoll(rest.substr(0, dot)));
}

// Removes `dir`/.NAME.tmp.PID.N files (NAME: `name`, fitted) whose process PID no longer exists.
void remove_orphaned_temps(const fs::path& dir, const std::string& name) {
  const std::string prefix = "." + name + ".tmp.";
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string file = it->path().filename().string();
    if (file.rfind(prefix, 0) != 0) continue;
    if (const pid_t pid = temp_file_writer(file); pid > 0 && process_gone(pid)) {
      std::error_code ignored;
      fs::remove(it->path(), ignored);
    }
  }
}

}  // namespace

bool process_gone(int pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

bool temp_file_in_progress(const std::string& name) {
  const pid_t pid = temp_file_writer(name);
  return pid > 0 && !process_gone(pid);
}

AtomicFile::AtomicFile(const fs::path& path) : target_(resolve_target(path, "file", false)) {
  static std::atomic<unsigned> counter{0};
  const fs::path dir = target_.has_parent_path() ? target_.parent_path() : fs::path(".");
  const std::string stem = fitted_name(target_.filename().string(), kTempNameExtra);
  remove_orphaned_temps(dir, stem);
  tmp_ = dir / ("." + stem + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++));
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) io_error("cannot create", target_);
  if (struct stat old; ::stat(target_.c_str(), &old) == 0) {
    ::fchmod(fd_, old.st_mode & 07777);
    if (::fchown(fd_, old.st_uid, old.st_gid) != 0) {
      // Only the owner's group or root may keep another owner; the bits above still hold.
    }
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ < 0) return;  // committed
  ::close(fd_);
  ::unlink(tmp_.c_str());
}

void AtomicFile::append(std::string_view bytes) {
  KTUNE_REQUIRE(fd_ >= 0, fmt::format("{} was already committed", target_.string()));
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      io_error("cannot write", target_);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  KTUNE_REQUIRE(fd_ >= 0, fmt::format("{} was already committed", target_.string()));
  const int fd = std::exchange(fd_, -1);
  const bool synced = ::fsync(fd) == 0;
  if (::close(fd) != 0 || !synced) {
    ::unlink(tmp_.c_str());
    io_error("cannot write", target_);
  }
  if (::rename(tmp_.c_str(), target_.c_str()) != 0) {
    ::unlink(tmp_.c_str());
    io_error("cannot rename onto", target_);
  }
  const fs::path dir = target_.has_parent_path() ? target_.parent_path() : fs::path(".");
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_file_atomic(const fs::path& path, std::string_view bytes) {
  AtomicFile file(path);
  file.append(bytes);
  file.commit();
}

namespace {
/// A file's modification time, in nanoseconds.
std::int64_t modified_ns(const struct stat& st) {
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}
}  // namespace

MappedFile::MappedFile(const fs::path& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) io_error("cannot read", path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    io_error("cannot read", path);
  }
  size_ = static_cast<std::size_t>(st.st_size);
  modified_ns_ = modified_ns(st);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      io_error("cannot map", path);
    }
    data_ = static_cast<const char*>(p);
  }
  fd_ = fd;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<char*>(data_), size_);
  if (fd_ >= 0) ::close(fd_);
}

void MappedFile::require_whole() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) io_error("cannot read", path_);
  constexpr const char* kReplaceWhole =
      "a file a run reads is replaced whole (write a new one and rename it over the old), never rewritten in place";
  if (static_cast<std::size_t>(st.st_size) < size_)
    throw_error(ErrorKind::kIo, fmt::format("{} was cut from {} to {} bytes while it was read: {}", path_.string(),
                                            size_, st.st_size, kReplaceWhole));
  // Rewritten as long or longer: what it holds now is not what was checked when it was opened.
  if (modified_ns(st) != modified_ns_)
    throw_error(ErrorKind::kIo, fmt::format("{} was written to while it was read (its modification time changed): "
                                            "what it holds now is not what was checked when it was opened; {}",
                                            path_.string(), kReplaceWhole));
}

namespace {

// Makes the missing folders of `dir`, the outermost first; returns those this
// call made (not another process at the same time), the innermost first.
std::vector<fs::path> make_folders(const fs::path& dir) {
  std::vector<fs::path> missing;
  std::error_code ec;
  for (fs::path d = dir; !d.empty() && !fs::exists(fs::symlink_status(d, ec)); d = d.parent_path()) {
    missing.push_back(d);
    if (d == d.parent_path()) break;
  }
  std::vector<fs::path> made;
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdir(it->c_str(), 0777) == 0) made.insert(made.begin(), *it);
    else if (errno != EEXIST) io_error("cannot create folder", *it);
  }
  return made;
}

// Removes the folders `made` (the innermost first) that are still empty.
void remove_empty(const std::vector<fs::path>& made) {
  for (const auto& d : made)
    if (::rmdir(d.c_str()) != 0) break;
}

}  // namespace

FileLock::FileLock(const fs::path& path, std::string_view busy) : path_(path) {
  for (int vanished = 0;;) {
    if (path.has_parent_path()) {
      const auto made = make_folders(path.parent_path());
      made_.insert(made_.begin(), made.begin(), made.end());
    }
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    // The folder went (a refused run took away the one it made): made again.
    if (fd_ < 0 && errno == ENOENT && ++vanished < 8) continue;
    if (fd_ < 0) {
      const int error = errno;
      remove_empty(made_);
      errno = error;
      io_error("cannot open lock file", path);
    }
    while (::flock(fd_, busy.empty() ? LOCK_EX : LOCK_EX | LOCK_NB) != 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd_);
      fd_ = -1;
      remove_empty(made_);
      if (error == EWOULDBLOCK && !busy.empty())
        throw_error(ErrorKind::kInvalidInput,
                    fmt::format("{} is being written by another ktune process (it holds {}); wait for it, or give "
                                "another path",
                                busy, path.string()));
      errno = error;
      io_error("cannot lock", path);
    }
    // The previous holder unlinks the file before it lets go: a lock on a
    // file no longer at `path` serialises nothing, so open the path again.
    struct stat held {}, current {};
    if (::fstat(fd_, &held) == 0 && ::stat(path.c_str(), &current) == 0 && held.st_dev == current.st_dev &&
        held.st_ino == current.st_ino)
      return;
    ::close(fd_);
    fd_ = -1;
  }
}

bool remove_unless_locked(const fs::path& path, const std::function<void()>& while_held) {
  std::optional<FileLock> held;
  try {
    held.emplace(lock_path(path), path.string());
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kInvalidInput) return false;  // another process holds it: the file is in use
    throw;
  }
  if (while_held) while_held();
  std::error_code ec;
  fs::remove(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory)
    throw_error(ErrorKind::kIo, fmt::format("cannot remove {}: {}", path.string(), ec.message()));
  return true;
}

bool lock_held(const fs::path& lock) {
  const int fd = ::open(lock.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  int r;
  while ((r = ::flock(fd, LOCK_SH | LOCK_NB)) != 0 && errno == EINTR) {
  }
  const bool held = r != 0 && errno == EWOULDBLOCK;
  ::close(fd);  // releases a lock this took
  return held;
}

FileLock::~FileLock() {
  if (fd_ >= 0) {
    ::unlink(path_.c_str());  // while still held: see the class comment
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  remove_empty(made_);  // a run that wrote nothing there leaves no folder behind
}

}  // namespace ktune
