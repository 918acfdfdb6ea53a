#include "tuner/compile/compile_ahead.hpp"

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "tuner/compile/compiler.hpp"

namespace ktune::tuner {
namespace {

/// The compiling process: reads batches (config JSON lines, each batch ended
/// by an empty line) from `fd` and compiles them on `threads` threads, the
/// newest batch first, until the socket closes and the queue is empty, or
/// until the binary cache does not keep a compile: the runner would not find
/// it there, and compiles everything itself.
[[noreturn]] void serve(const templates::Family& family, const templates::Problem& problem, const std::string& arch,
                        unsigned threads, int fd) {
  // A forked child: an exception here would unwind into the parent's stack, copied (its locks' destructors).
  std::optional<Compiler> made;
  try {
    made.emplace();
  } catch (...) {
    ::_exit(1);  // the runner compiles what it needs itself
  }
  const Compiler& compiler = *made;
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<Config> queue;
  bool closed = false;
  bool useless = false;  // the binary cache keeps nothing
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < std::max(1u, threads); ++t)
    pool.emplace_back([&] {
      for (;;) {
        std::unique_lock lock(mutex);
        ready.wait(lock, [&] { return closed || useless || !queue.empty(); });
        if (useless || queue.empty()) return;
        const Config c = std::move(queue.front());
        queue.pop_front();
        lock.unlock();
        try {
          if (!compiler.compile(family.render(c, problem), arch).not_stored.empty()) {
            lock.lock();
            useless = true;
            lock.unlock();
            ready.notify_all();
            ::shutdown(fd, SHUT_RDWR);  // the reader's read ends, and the runner's next add() finds the process gone
            return;
          }
        } catch (const std::exception&) {
          // The runner compiles it again and reports the failure as a result.
        }
      }
    });
  std::string buffer, line;
  std::vector<Config> batch;
  char chunk[4096];
  for (ssize_t n; (n = ::read(fd, chunk, sizeof chunk)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    buffer.append(chunk, static_cast<std::size_t>(n));
    for (std::size_t eol; (eol = buffer.find('\n')) != std::string::npos;) {
      line = buffer.substr(0, eol);
      buffer.erase(0, eol + 1);
      if (!line.empty()) {
        try {
          batch.push_back(Config::from_json(nlohmann::json::parse(line)));
        } catch (const std::exception&) {
        }
        continue;
      }
      {
        std::lock_guard lock(mutex);
        queue.insert(queue.begin(), batch.begin(), batch.end());
      }
      batch.clear();
      ready.notify_all();
    }
  }
  {
    std::lock_guard lock(mutex);
    closed = true;
  }
  ready.notify_all();
  for (auto& t : pool) t.join();
  ::_exit(0);
}

}  // namespace

CompileAhead::CompileAhead(const templates::Family& family, const templates::Problem& problem,
                           const std::string& arch, unsigned threads) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return;  // nothing is compiled ahead
  pid_ = ::fork();
  if (pid_ == 0) {
    // The parent's handlers (Ctrl-C, a test framework's) are not ours: the
    // parent ends this process with SIGTERM, which must simply end it.
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGINT, SIG_IGN);
    ::signal(SIGPIPE, SIG_DFL);
    ::close(fds[0]);
    serve(family, problem, arch, threads, fds[1]);
  }
  ::close(fds[1]);
  if (pid_ < 0) {
    ::close(fds[0]);
    return;
  }
  fd_ = fds[0];
}

void CompileAhead::add(const std::vector<Config>& configs) {
  if (fd_ < 0) return;
  std::string message;
  for (const auto& c : configs)
    if (sent_.insert(c).second) message += c.to_json().dump() + "\n";
  if (message.empty()) return;
  message += "\n";
  for (std::size_t done = 0; done < message.size();) {
    const ssize_t n = ::send(fd_, message.data() + done, message.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {  // the compiling process is gone: the runner compiles everything itself
      ::close(fd_);
      fd_ = -1;
      return;
    }
    done += static_cast<std::size_t>(n);
  }
}

bool CompileAhead::compiling() {
  if (fd_ < 0 || pid_ <= 0) return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) != pid_) return true;
  pid_ = -1;
  wait();  // closes our end
  return false;
}

CompileAhead::~CompileAhead() {
  if (pid_ > 0) ::kill(pid_, SIGTERM);
  wait();
}

void CompileAhead::wait() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (pid_ <= 0) return;
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

}  // namespace ktune::tuner
