// GPU marks: a locked file per process and GPU (see gpu_marks.hpp).
#include "tuner/cuda/gpu_marks.hpp"

#include <dirent.h>
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
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <utility>


namespace ktune::tuner {

namespace fs = std::filesystem;

namespace {

/// A descriptor that closes itself.
struct Fd {
  int fd = -1;
  explicit Fd(int f = -1) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  explicit operator bool() const { return fd >= 0; }
};

/// The folder `name` under `at` opened where it is, no link followed (none where it is not a folder, or is gone).
Fd open_folder(int at, const char* name) {
  return Fd(::openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
}

/// The shared folder `name` under `at`, made if missing: one this call makes is given mode 1777 (every user makes
/// a folder of their own in it, none removes another's, as in /tmp) through its descriptor, so a link put in its
/// place meanwhile changes nothing.
Fd shared_folder(int at, const char* name) {
  const bool made = ::mkdirat(at, name, 0700) == 0;
  Fd fd = open_folder(at, name);
  struct stat st {};
  if (fd && made && ::fstat(fd.fd, &st) == 0 && st.st_uid == ::geteuid()) ::fchmod(fd.fd, 01777);
  return fd;
}

/// Whether the folder open at `fd` is `uid`'s alone to write: owned by it, and no other user may write there. A
/// mark is only read from, made in or removed from such a folder, so no other user can put a file, a link or a
/// fifo in it, nor rename what is in it.
bool owned_by(int fd, uid_t uid) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == uid && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

/// The folder of this user's marks of the GPU `uuid` under `dir` (dir/uuid/UID, mode 0755), made where missing;
/// none where a part of the way is not as it should be.
Fd own_folder(const fs::path& dir, const std::string& uuid) {
  std::error_code ec;
  if (dir.has_parent_path()) fs::create_directories(dir.parent_path(), ec);
  const Fd top = shared_folder(AT_FDCWD, dir.c_str());
  if (!top) return Fd();
  const Fd gpu = shared_folder(top.fd, uuid.c_str());
  if (!gpu) return Fd();
  const std::string uid = std::to_string(::geteuid());
  ::mkdirat(gpu.fd, uid.c_str(), 0755);
  Fd own = open_folder(gpu.fd, uid.c_str());
  if (own && owned_by(own.fd, ::geteuid())) return own;
  return Fd();
}

/// This process's mark file: made new (O_EXCL, no link followed) in this user's folder (own_folder), readable by
/// all (0644, whatever the umask), its line written through its descriptor; locked (flock) while the process
/// lives, and removed while still locked when released.
class MarkFile {
 public:
  MarkFile(const fs::path& dir, const std::string& uuid, const std::string& name, const std::string& line)
      : folder_(own_folder(dir, uuid)), name_(name) {
    if (!folder_) return;
    Fd fd(::openat(folder_.fd, name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!fd) return;  // the name is unique to this process (its pid and session token): not made again
    ::fchmod(fd.fd, 0644);
    // Another process's look holds the lock a moment while it tells a live mark from a killed process's: tried
    // again; a look that took this fresh file for a stale one has removed it (checked by its inode), and then
    // none is made.
    for (int attempt = 0; attempt < 20; ++attempt, std::this_thread::sleep_for(std::chrono::milliseconds(1))) {
      if (::flock(fd.fd, LOCK_EX | LOCK_NB) != 0) continue;
      struct stat held {}, current {};
      if (::fstat(fd.fd, &held) != 0 || ::fstatat(folder_.fd, name_.c_str(), &current, AT_SYMLINK_NOFOLLOW) != 0 ||
          held.st_ino != current.st_ino || held.st_dev != current.st_dev)
        return;
      fd_ = std::move(fd);
      if (::write(fd_.fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) release();
      return;
    }
    ::unlinkat(folder_.fd, name_.c_str(), 0);  // never locked: no mark left behind
  }
  ~MarkFile() { release(); }
  MarkFile(const MarkFile&) = delete;
  MarkFile& operator=(const MarkFile&) = delete;
  bool held() const { return static_cast<bool>(fd_); }
  /// Closes this process's copies without unlocking or removing the mark: a child forked while it was held,
  /// whose copy is its parent's (a flock belongs to the open file, which the fork shares).
  void abandon() {
    ::close(std::exchange(fd_.fd, -1));
    ::close(std::exchange(folder_.fd, -1));
  }

 private:
  void release() {
    if (!fd_) return;
    ::unlinkat(folder_.fd, name_.c_str(), 0);  // while still locked: a look never takes a live mark for a stale one
    ::flock(fd_.fd, LOCK_UN);
    fd_ = Fd();
  }
  Fd folder_;
  std::string name_;
  Fd fd_;
};

/// Guards everything below. Held across a fork (pthread_atfork), so a child never finds it locked by a thread
/// the fork left behind.
std::mutex g_mutex;
std::map<fs::path, std::weak_ptr<MarkFile>> g_held;  // this process's marks, by dir/uuid/name
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

bool all_digits(const std::string& text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

/// The session of a mark's file name "ROOT-PID.lock"; none for any other name.
std::optional<std::string> mark_root(const std::string& name) {
  constexpr std::string_view kSuffix = ".lock";
  if (!name.ends_with(kSuffix)) return std::nullopt;
  const std::string stem = name.substr(0, name.size() - kSuffix.size());
  const auto dash = stem.rfind('-');
  if (dash == std::string::npos || dash == 0 || !all_digits(stem.substr(dash + 1)) || stem.size() - dash - 1 > 9)
    return std::nullopt;
  return stem.substr(0, dash);
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

/// The line of the mark `name` in the folder `folder` where its process holds it. Where it does not (the process
/// was killed before it could remove it), nothing, and where the folder is this user's the file is removed,
/// under its own lock, taken at once or not at all, and only while the name is still that file (another look
/// may have removed it and its process made it again): a live mark is never removed. Never waits (a fifo or a
/// link under the name is not followed, nor waited on).
std::optional<std::string> held_else_removed(int folder, const std::string& name, bool own) {
  const Fd fd(::openat(folder, name.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW));
  struct stat locked {};
  if (!fd || ::fstat(fd.fd, &locked) != 0 || !S_ISREG(locked.st_mode)) return std::nullopt;
  int r = 0;
  while ((r = ::flock(fd.fd, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
  }
  if (r == 0) {  // stale
    struct stat current {};
    if (own && ::fstatat(folder, name.c_str(), &current, AT_SYMLINK_NOFOLLOW) == 0 &&
        current.st_ino == locked.st_ino && current.st_dev == locked.st_dev)
      ::unlinkat(folder, name.c_str(), 0);
    return std::nullopt;  // the descriptor's close releases the lock this took
  }
  if (errno != EWOULDBLOCK) return std::nullopt;
  char buf[512];
  const ssize_t n = ::read(fd.fd, buf, sizeof buf);
  std::string line = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
  line = line.substr(0, line.find('\n'));
  // What a mark says is printed: printable ASCII alone (no terminal escape, no control character).
  std::replace_if(line.begin(), line.end(), [](unsigned char c) { return c < 0x20 || c >= 0x7f; }, '?');
  return line;
}

/// The lines of the live marks of the GPU `uuid` under `dir`, every user's, but this process's own (`skip`, its
/// file's name) and those of the session `root` (where given); this user's stale ones removed on the way (a
/// session's own workers' too). A user's folder is read only where that user alone may write it (owned_by).
/// Under g_mutex, so no fork meanwhile gives a child a copy of a lock taken to look.
std::vector<std::string> scan(const fs::path& dir, const std::string& uuid, const std::string& skip,
                              const std::string* root) {
  std::vector<std::string> out;
  if (dir.empty() || uuid.empty()) return out;
  const Fd top = open_folder(AT_FDCWD, dir.c_str());
  const Fd gpu = top ? open_folder(top.fd, uuid.c_str()) : Fd();
  if (!gpu) return out;
  const auto names_in = [](int folder) {
    std::vector<std::string> names;
    const int copy = ::dup(folder);
    DIR* d = copy >= 0 ? ::fdopendir(copy) : nullptr;
    if (!d) {
      if (copy >= 0) ::close(copy);
      return names;
    }
    while (const dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') names.emplace_back(e->d_name);
    ::closedir(d);
    return names;
  };
  for (const std::string& user : names_in(gpu.fd)) {
    if (!all_digits(user) || user.size() > 10) continue;
    const unsigned long long id = std::stoull(user);  // 10 digits at most: no overflow
    if (id > std::numeric_limits<uid_t>::max()) continue;
    const uid_t uid = static_cast<uid_t>(id);
    const Fd folder = open_folder(gpu.fd, user.c_str());
    if (!folder || !owned_by(folder.fd, uid)) continue;
    const bool own = uid == ::geteuid();
    for (const std::string& name : names_in(folder.fd)) {
      const auto session = mark_root(name);
      if ((own && name == skip) || !session) continue;
      // A live mark whose line is not written yet is seen at the next look.
      const auto line = held_else_removed(folder.fd, name, own);
      if (line && !line->empty() && !(root && *session == *root)) out.push_back(*line);
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> marked_on(const fs::path& dir, const std::string& uuid) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  return scan(dir, uuid, {}, nullptr);
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

GpuMark::GpuMark(const fs::path& dir, const std::string& uuid, const std::string& root)
    : dir_(dir), uuid_(uuid), root_(root) {
  (void)kForkHandlers;
  if (dir.empty() || uuid.empty()) return;
  const std::string name = fmt::format("{}-{}.lock", root, ::getpid());
  const fs::path key = dir / uuid / name;
  const std::lock_guard<std::mutex> lock(g_mutex);
  if (auto held = g_held[key].lock()) {
    held_ = held;
    name_ = name;
    return;
  }
  auto held = std::make_shared<MarkFile>(dir, uuid, name, fmt::format("pid {} ({})\n", ::getpid(), own_command()));
  if (!held->held()) return;  // none made: this process runs unseen, and still sees the others
  g_held[key] = held;
  held_ = held;
  name_ = name;
}

GpuMark::~GpuMark() {
  const std::lock_guard<std::mutex> lock(g_mutex);
  held_.reset();  // the last mark of the GPU releases the lock and removes the file
}

std::vector<std::string> GpuMark::others() const {
  const std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<std::string> out = scan(dir_, uuid_, name_, &root_);  // a live mark of this session is no neighbour
  add_unseen(g_seen, out);
  return out;
}

}  // namespace ktune::tuner
