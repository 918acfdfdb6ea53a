#include "tuner/run/isolated_runner.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <new>

#include "base/error.hpp"
#include "base/host_memory.hpp"
#include "base/json_output.hpp"
#include "tuner/compile/compiler.hpp"
#include "tuner/cuda/driver.hpp"
#include "tuner/cuda/gpu_marks.hpp"

namespace ktune::tuner {
namespace {

// Messages are an 8-byte length followed by that many bytes of JSON.
bool write_all(int fd, const void* data, std::size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);  // a dead peer is an error, not SIGPIPE
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

bool send_message(int fd, const std::string& text) {
  const std::uint64_t n = text.size();
  return write_all(fd, &n, sizeof n) && write_all(fd, text.data(), text.size());
}

/// Reads exactly `n` bytes before `deadline`; false on EOF or time-out
/// (`timed_out` tells which).
bool read_all(int fd, void* data, std::size_t n, std::chrono::steady_clock::time_point deadline, bool& timed_out) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      return false;
    }
    pollfd pfd{fd, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

bool receive_message(int fd, std::string& text, std::chrono::steady_clock::time_point deadline, bool& timed_out) {
  std::uint64_t n = 0;
  if (!read_all(fd, &n, sizeof n, deadline, timed_out)) return false;
  text.resize(n);
  return read_all(fd, text.data(), n, deadline, timed_out);
}

const Family& resolve(const std::string& name, const std::vector<const Family*>& extra) {
  for (const Family* f : extra)
    if (f->name() == name) return *f;
  return templates::find_family(name);
}

/// The worker's loop: the first message out is the device (or the error that
/// stopped the runner from starting), then one result per request.
[[noreturn]] void worker_main(int in, int out, const std::function<std::unique_ptr<Runner>()>& make_inner,
                              const std::vector<const Family*>& extra, bool cuda_before_fork) {
  // A crash here must end this process the default way, whatever handlers
  // the parent installed (a test framework's, say), so the parent sees it.
  for (int sig : {SIGABRT, SIGSEGV, SIGILL, SIGFPE, SIGBUS}) ::signal(sig, SIG_DFL);
  // A stop request is the parent's to heed (after this evaluation); Ctrl-C
  // and a closed terminal's SIGHUP reach the whole process group. The parent
  // ends a worker by closing its pipe, or with SIGKILL; and a parent that
  // dies takes it along (start()).
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_IGN);
  ::signal(SIGPIPE, SIG_DFL);  // the parent's stop on a closed pipe is its own: a write here ends this process as ever
  std::unique_ptr<Runner> runner;
  try {
    runner = make_inner();
    send_message(out, nlohmann::json{{"device", runner->device().to_json()}, {"backend", runner->backend()}}.dump());
  } catch (const Error& e) {
    std::string why = e.what();
    if (cuda_before_fork)
      why += " (this process had initialised CUDA before it forked the worker, and CUDA does not carry over "
             "fork(): create the isolated runner before the process's first GPU work)";
    send_message(out, dump_json(nlohmann::json{{"error", why}, {"kind", static_cast<int>(e.kind())}}));
    ::_exit(0);
  }
  for (;;) {
    std::string text;
    bool timed_out = false;
    if (!receive_message(in, text, std::chrono::steady_clock::time_point::max(), timed_out)) ::_exit(0);
    nlohmann::json reply;
    bool restart = false;
    try {
      const auto req = nlohmann::json::parse(text);
      const Family& family = resolve(req.at("family").get<std::string>(), extra);
      const RunResult r = runner->run(family, Config::from_json(req.at("config")),
                                      Problem::from_json(req.at("problem")), run_options_from_json(req.at("options")));
      reply = {{"result", to_json(r)}};
      // A CUDA error may be sticky (an illegal address leaves the context
      // unusable, and every later variant here would fail with it): after
      // one, this worker ends and the parent starts a fresh one.
      restart = r.failure.rfind("launch: ", 0) == 0;
      if (restart) reply["restart"] = true;
    } catch (const Error& e) {
      reply = {{"error", e.what()}, {"kind", static_cast<int>(e.kind())}};
    } catch (const std::bad_alloc&) {  // the problem's buffers, most likely: as the command says it without workers
      reply = {{"error", kOutOfHostMemory}, {"kind", static_cast<int>(ErrorKind::kInvalidInput)}};
    } catch (const std::exception& e) {
      reply = {{"error", e.what()}, {"kind", static_cast<int>(ErrorKind::kInternal)}};
    }
    // A failure may quote a compiler's log, in whatever encoding the kernel source is.
    if (!send_message(out, dump_json(reply)) || restart) ::_exit(0);
  }
}

class IsolatedRunner final : public Runner {
 public:
  IsolatedRunner(std::function<std::unique_ptr<Runner>()> make_inner, IsolationOptions options)
      : make_inner_(std::move(make_inner)), options_(std::move(options)) {
    start();
  }
  ~IsolatedRunner() override { stop(0); }  // the worker ends on end-of-file; killed if it does not

  std::string backend() const override { return backend_; }
  const DeviceLimits& device() const override { return device_; }

  RunResult run(const Family& family, const Config& config, const Problem& problem,
                const RunOptions& options) override {
    if (pid_ <= 0) start();
    const std::string request = nlohmann::json{{"family", family.name()}, {"config", config.to_json()},
                                                {"problem", problem.to_json()}, {"options", to_json(options)}}
                                    .dump();
    RunResult failed;
    if (!send_message(to_worker_, request)) {
      failed.failure = "crashed: " + stop(0) + "; worker restarted";
      return failed;
    }
    std::string text;
    bool timed_out = false;
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<long long>(options_.timeout_s * 1000));
    if (!receive_message(from_worker_, text, deadline, timed_out)) {
      const std::string how = stop(timed_out ? SIGKILL : 0);
      failed.failure = timed_out ? fmt::format("timeout: no result within {:g} s; worker killed and restarted",
                                               options_.timeout_s)
                                 : "crashed: " + how + "; worker restarted";
      return failed;
    }
    const auto reply = nlohmann::json::parse(text);
    if (reply.contains("error"))
      throw_error(static_cast<ErrorKind>(reply.value("kind", static_cast<int>(ErrorKind::kInternal))),
                  reply["error"].get<std::string>());
    RunResult result = run_result_from_json(reply.at("result"));
    if (!result.not_stored.empty()) note_not_stored(result.not_stored);  // compiled in the worker: counted here
    if (reply.value("restart", false)) {  // the worker ends by itself; the next run starts a fresh one
      stop(0);
      result.failure += "; worker restarted";
    }
    return result;
  }

 private:
  void start() {
    int down[2] = {-1, -1}, up[2] = {-1, -1};
    // Closes what was made before a failure (a session restarts its worker after every crash: leaked, they add up).
    const auto fail = [&](const std::string& what) {
      const std::string why = std::strerror(errno);
      for (const int fd : {down[0], down[1], up[0], up[1]})
        if (fd >= 0) ::close(fd);
      throw_error(ErrorKind::kIo, what + ": " + why);
    };
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, down) != 0) fail("cannot create worker sockets");
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, up) != 0) fail("cannot create worker sockets");
    const bool cuda_before_fork = Driver::initialised();
    const pid_t parent = ::getpid();
    const std::string session = process_root();  // the worker marks a GPU as this process's session
    const pid_t pid = ::fork();
    if (pid < 0) fail("cannot fork a worker");
    if (pid == 0) {
      // The worker dies with this process (it ignores stop signals, and a hung variant would outlive it). Its own
      // process group holds it and what it starts (a host compiler), so that ending it ends them too.
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(0);  // it died before the line above
      set_process_root(session);
      ::close(down[1]);
      ::close(up[0]);
      try {
        worker_main(down[0], up[1], make_inner_, options_.extra_families, cuda_before_fork);
      } catch (...) {
        // Ends here: unwound further, it would run the parent's destructors in this copy of its stack (a lock
        // file of the parent's removed, a file it is writing deleted) and go on as the parent.
      }
      ::_exit(1);
    }
    ::setpgid(pid, pid);  // as the worker does, whichever runs first
    ::close(down[0]);
    ::close(up[1]);
    pid_ = pid;
    to_worker_ = down[1];
    from_worker_ = up[0];
    std::string text;
    bool timed_out = false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    if (!receive_message(from_worker_, text, deadline, timed_out))
      throw_error(ErrorKind::kInternal, "the worker process did not start: " + stop(SIGKILL));
    const auto hello = nlohmann::json::parse(text);
    if (hello.contains("error")) {
      stop(SIGKILL);
      throw_error(static_cast<ErrorKind>(hello.value("kind", static_cast<int>(ErrorKind::kInternal))),
                  hello["error"].get<std::string>());
    }
    device_ = DeviceLimits::from_json(hello.at("device"));
    backend_ = hello.at("backend").get<std::string>();
  }

  /// Ends the worker and what it started (its process group): sends
  /// `signal` (0: none, the worker is ending by itself), waits up to a
  /// second, then kills them. Returns how it ended ("worker died of signal 6
  /// (Aborted)").
  std::string stop(int signal) {
    if (pid_ <= 0) return "no worker";
    ::close(to_worker_);
    ::close(from_worker_);
    int status = 0;
    pid_t done = ::waitpid(pid_, &status, WNOHANG);
    if (done == 0 && signal != 0) ::kill(-pid_, signal);
    for (int i = 0; i < 50 && done == 0; ++i) {
      ::usleep(20000);
      done = ::waitpid(pid_, &status, WNOHANG);
    }
    if (done == 0) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
    }
    pid_ = -1;
    if (WIFSIGNALED(status))
      return fmt::format("worker died of signal {} ({})", WTERMSIG(status), ::strsignal(WTERMSIG(status)));
    if (WIFEXITED(status)) return fmt::format("worker exited with status {}", WEXITSTATUS(status));
    return "worker ended";
  }

  std::function<std::unique_ptr<Runner>()> make_inner_;
  IsolationOptions options_;
  pid_t pid_ = -1;
  int to_worker_ = -1, from_worker_ = -1;
  DeviceLimits device_;
  std::string backend_;
};

}  // namespace

std::unique_ptr<Runner> make_isolated_runner(std::function<std::unique_ptr<Runner>()> make_inner,
                                             IsolationOptions options) {
  return std::make_unique<IsolatedRunner>(std::move(make_inner), std::move(options));
}

}  // namespace ktune::tuner
