// GPU marks: a locked file per process and GPU (see gpu_marks.hpp).
#include "tuner/cuda/gpu_marks.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <pthread.h>
#include <sys/file.h>
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

/// Guards everything below. Held across a fork (pthread_atfork), so a child never finds it locked by a thread
/// the fork left behind.
std::mutex g_mutex;
std::map<fs::path, std::weak_ptr<FileLock>> g_held;  // this process's marks, by file
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
  } else if (r == 0) {
    ::unlink(file.c_str());
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
  std::error_code ec;
  // Every user's processes mark a GPU in one folder: made writable by all, each removing only its own files
  // (the sticky bit), as /tmp is. Where another user made it, it stays as it is.
  const auto shared = [](const fs::path& made) {
    std::error_code ignored;  // a folder left private is still this user's processes' to share
    fs::permissions(made, fs::perms::all | fs::perms::sticky_bit, ignored);
  };
  if (fs::create_directories(dir, ec)) shared(dir);
  if (!ec && fs::create_directory(folder_, ec)) shared(folder_);
  if (ec) return;
  const fs::path file = folder_ / fmt::format("{}-{}.lock", root, ::getpid());
  const std::lock_guard<std::mutex> lock(g_mutex);
  if (auto held = g_held[file].lock()) {
    held_ = held;
    file_ = file;
    return;
  }
  // Another process's look holds a mark's lock for a moment (held_else_removed): tried again a few times,
  // then none is made.
  for (int attempt = 0; attempt < 20; ++attempt) {
    try {
      auto held = std::make_shared<FileLock>(file, "a GPU mark");
      std::ofstream(file, std::ios::trunc) << fmt::format("pid {} ({})\n", ::getpid(), own_command());
      g_held[file] = held;
      held_ = held;
      file_ = file;
      return;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kInvalidInput) return;  // a folder that cannot be written: no mark
    } catch (const std::exception&) {
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
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
