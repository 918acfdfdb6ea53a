// GPU marks: a locked file per process and GPU (see gpu_marks.hpp).
#include "tuner/cuda/gpu_marks.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "base/error.hpp"
#include "base/files.hpp"

namespace ktune::tuner {

namespace fs = std::filesystem;

namespace {

/// A folder opened where it is, no link followed (-1 where it is not a folder of its own, or is gone); one
/// made by this call is given mode 1777 (writable by all, each removing only its own files, as /tmp) through the
/// descriptor, so a link put in its place meanwhile changes nothing.
int open_folder(int at, const char* name) {
  const bool made = ::mkdirat(at, name, 0700) == 0;
  const int fd = ::openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st {};
  if (fd >= 0 && made && ::fstat(fd, &st) == 0 && st.st_uid == ::geteuid()) ::fchmod(fd, 01777);
  return fd;
}

/// This process's mark file: made new (O_EXCL, no link followed, in folders opened without following one), so
/// in a folder every user may write nothing put there by another redirects the write; readable by all (0644,
/// whatever the umask), its line written through its descriptor; locked (flock) while the process lives, and
/// removed while still locked when released.
class MarkFile {
 public:
  MarkFile(const fs::path& dir, const std::string& uuid, const std::string& name, const std::string& line)
      : name_(name) {
    std::error_code ec;
    if (dir.has_parent_path()) fs::create_directories(dir.parent_path(), ec);
    const int top = open_folder(AT_FDCWD, dir.c_str());
    if (top < 0) return;
    folder_ = open_folder(top, uuid.c_str());
    ::close(top);
    if (folder_ < 0) return;
    // A look by another process takes an unlocked mark for a killed process's and removes it: one it took in
    // the moment between this file's making and its lock is made again; a file under this name that stays (not
    // this process's) makes no mark.
    for (int attempt = 0; attempt < 20; ++attempt, std::this_thread::sleep_for(std::chrono::milliseconds(1))) {
      const int fd = ::openat(folder_, name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
      if (fd < 0) {
        if (errno == EEXIST) continue;
        return;
      }
      ::fchmod(fd, 0644);
      struct stat held {}, current {};
      if (::flock(fd, LOCK_EX | LOCK_NB) == 0 && ::fstat(fd, &held) == 0 &&
          ::fstatat(folder_, name_.c_str(), &current, AT_SYMLINK_NOFOLLOW) == 0 && held.st_ino == current.st_ino &&
          held.st_dev == current.st_dev) {
        fd_ = fd;
        if (::write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) release();
        return;
      }
      ::close(fd);
    }
  }
  ~MarkFile() {
    release();
    if (folder_ >= 0) ::close(folder_);
  }
  MarkFile(const MarkFile&) = delete;
  MarkFile& operator=(const MarkFile&) = delete;
  bool held() const { return fd_ >= 0; }
  /// Closes this process's copies without unlocking or removing the mark: a child forked while it was held,
  /// whose copy is its parent's (a flock belongs to the open file, which the fork shares).
  void abandon() {
    if (fd_ >= 0) ::close(fd_);
    if (folder_ >= 0) ::close(folder_);
    fd_ = folder_ = -1;
  }

 private:
  void release() {
    if (fd_ < 0) return;
    ::unlinkat(folder_, name_.c_str(), 0);  // while still locked: a look never takes a live mark for a stale one
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
    fd_ = -1;
  }
  std::string name_;
  int folder_ = -1;
  int fd_ = -1;
};

/// Guards everything below. Held across a fork (pthread_atfork), so a child never finds it locked by a thread
/// the fork left behind.
std::mutex g_mutex;
std::map<fs::path, std::weak_ptr<MarkFile>> g_held;  // this process's marks, by file
std::vector<std::string> g_seen;                     // others_seen()
pid_t g_root_owner = 0;                              // the process g_root is of
std::string g_root;

std::string own_root() {  // under g_mutex
  if (g_root_owner != ::getpid()) {
    g_root_owner = ::getpid();
    std::random_device random;
    g_root = fmt::format("{}x{:08x}{:08x}", ::getpid(), random(), random());
  }
  return g_root;
}

// A child forked while marks are held: they are its parent's, left to it.
void before_fork() { g_mutex.lock(); }
void after_fork_in_parent() { g_mutex.unlock(); }
void after_fork_in_child() {
  for (auto& [file, weak] : g_held)
    if (const auto held = weak.lock()) held->abandon();
  g_held.clear();
  g_mutex.unlock();
}
const bool kForkHandlers = [] {
  return ::pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child) == 0;
}();

/// The session and pid of a mark's file name "ROOT-PID.lock"; false for any other name.
bool parse_mark(const std::string& name, std::string& root, long& pid) {
  constexpr std::string_view kSuffix = ".lock";
  if (!name.ends_with(kSuffix)) return false;
  const std::string stem = name.substr(0, name.size() - kSuffix.size());
  const auto dash = stem.rfind('-');
  if (dash == std::string::npos || dash == 0 || dash + 1 == stem.size()) return false;
  root = stem.substr(0, dash);
  const std::string digits = stem.substr(dash + 1);
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }) || digits.size() > 9)
    return false;
  pid = std::stol(digits);
  return true;
}

/// This process's command line as /proc has it, its arguments joined by spaces and cut at 200 characters.
std::string own_command() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!text.empty() && text.back() == '\0') text.pop_back();
  std::replace(text.begin(), text.end(), '\0', ' ');
  constexpr std::size_t kWidth = 200;
  if (text.size() > kWidth) text = text.substr(0, kWidth - 3) + "...";
  return text.empty() ? "its command not readable" : text;
}

/// The line of the mark `file` where its process holds it; where it does not (the process was killed before it
/// could remove it), nothing, and the file is removed, under its own lock, taken at once or not at all: an owner
/// that locks the file after this look finds it gone and makes it again (FileLock), so a live mark is never
/// removed. Never waits (a fifo or a link under the name is not followed, nor waited on).
std::optional<std::string> held_else_removed(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0) return std::nullopt;
  int r = 0;
  while ((r = ::flock(fd, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
  }
  const bool held = r != 0 && errno == EWOULDBLOCK;
  std::string line;
  if (held) {
    char buf[512];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) line.assign(buf, static_cast<std::size_t>(n));
    line = line.substr(0, line.find('\n'));
    // Any user may write a file there: what it says is printed, so no control character (a terminal's escapes).
    std::replace_if(line.begin(), line.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; }, '?');
  } else if (struct stat st {}; r == 0 && ::fstat(fd, &st) == 0 && st.st_uid == ::geteuid()) {
    ::unlink(file.c_str());  // another user's is left to it (the folder's sticky bit): unlocked, it names no one
  }
  ::close(fd);  // releases the lock this took
  if (!held) return std::nullopt;
  return line;
}

/// The lines of the live marks in `folder` but `skip` (this process's own) and those of the session `root` (where
/// given); the stale ones removed on the way (a session's own workers' too).
std::vector<std::string> scan(const fs::path& folder, const fs::path& skip, const std::string* root) {
  std::vector<std::string> out;
  if (folder.empty()) return out;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    std::string mark_root;
    long pid = 0;
    if (it->path() == skip || !parse_mark(it->path().filename().string(), mark_root, pid)) continue;
    // A live mark whose line is not written yet is seen at the next look.
    const auto line = held_else_removed(it->path());
    if (line && !line->empty() && !(root && mark_root == *root)) out.push_back(*line);
  }
  return out;
}

}  // namespace

std::vector<std::string> marked_on(const fs::path& dir, const std::string& uuid) {
  return dir.empty() || uuid.empty() ? std::vector<std::string>{} : scan(dir / uuid, {}, nullptr);
}

std::string process_root() {
  const std::lock_guard<std::mutex> lock(g_mutex);
  return own_root();
}

void set_process_root(const std::string& root) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  g_root_owner = ::getpid();
  g_root = root;
}

void add_unseen(std::vector<std::string>& names, const std::vector<std::string>& more) {
  for (const auto& name : more)
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
}

std::vector<std::string> others_seen() {
  const std::lock_guard<std::mutex> lock(g_mutex);
  return g_seen;
}

std::string shared_gpu_warning(const std::string& other, const std::string& again) {
  return fmt::format("warning: {} used this GPU too: the times measured beside it are slowed and spread by its work; "
                     "{} when it has finished, or on another GPU (CUDA_VISIBLE_DEVICES)",
                     other, again);
}

GpuMark::GpuMark(const fs::path& dir, const std::string& uuid, const std::string& root) : root_(root) {
  (void)kForkHandlers;
  if (dir.empty() || uuid.empty()) return;
  folder_ = dir / uuid;
  const std::string name = fmt::format("{}-{}.lock", root, ::getpid());
  const fs::path file = folder_ / name;
  const std::lock_guard<std::mutex> lock(g_mutex);
  if (auto held = g_held[file].lock()) {
    held_ = held;
    file_ = file;
    return;
  }
  auto held = std::make_shared<MarkFile>(dir, uuid, name, fmt::format("pid {} ({})\n", ::getpid(), own_command()));
  if (!held->held()) return;  // none made: this process runs unseen, and still sees the others
  g_held[file] = held;
  held_ = held;
  file_ = file;
}

GpuMark::~GpuMark() {
  const std::lock_guard<std::mutex> lock(g_mutex);
  held_.reset();  // the last mark of the GPU releases the lock and removes the file
}

std::vector<std::string> GpuMark::others() const {
  const std::vector<std::string> out = scan(folder_, file_, &root_);  // a live mark of this session is no neighbour
  const std::lock_guard<std::mutex> lock(g_mutex);
  add_unseen(g_seen, out);
  return out;
}

}  // namespace ktune::tuner
