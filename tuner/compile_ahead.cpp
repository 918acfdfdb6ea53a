#include "tuner/compile_ahead.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <thread>

#include "tuner/compiler.hpp"

namespace ktune::tuner {

CompileAhead::CompileAhead(const templates::Family& family, const templates::Problem& problem,
                           const std::vector<Config>& configs, const std::string& arch, unsigned threads) {
  pid_ = ::fork();
  if (pid_ != 0) return;  // the parent goes on (or, if fork failed, simply compiles nothing ahead)
  const Compiler compiler;
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < std::max(1u, threads); ++t)
    pool.emplace_back([&] {
      for (std::size_t i; (i = next++) < configs.size();) {
        try {
          compiler.compile(family.render(configs[i], problem), arch);
        } catch (const std::exception&) {
          // The runner compiles it again and reports the failure as a result.
        }
      }
    });
  for (auto& t : pool) t.join();
  ::_exit(0);
}

CompileAhead::~CompileAhead() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  wait();
}

void CompileAhead::wait() {
  if (pid_ <= 0) return;
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

}  // namespace ktune::tuner
