// Compilation ahead of the benchmark: while the GPU measures one variant, a
// pool of threads compiles the ones that come next into the on-disk binary
// cache, so the runner (in its worker process) finds them compiled.
#pragma once
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

#include "templates/family.hpp"
#include "tuner/compiler.hpp"

namespace ktune::tuner {

class CompileAhead {
 public:
  /// Starts compiling `configs` (in order) of `family` for `problem` and
  /// `arch` on `threads` threads. Failures are left for the runner to report.
  CompileAhead(const templates::Family& family, const templates::Problem& problem, std::vector<Config> configs,
               std::string arch, unsigned threads);
  /// Stops after the compilations in flight.
  ~CompileAhead();
  CompileAhead(const CompileAhead&) = delete;
  CompileAhead& operator=(const CompileAhead&) = delete;

  /// Blocks until every config has been compiled (or stop was asked).
  void wait();
  std::size_t compiled() const { return compiled_.load(); }

 private:
  void work();

  const templates::Family& family_;
  templates::Problem problem_;
  std::vector<Config> configs_;
  std::string arch_;
  Compiler compiler_;
  std::atomic<std::size_t> next_{0};
  std::atomic<std::size_t> compiled_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

}  // namespace ktune::tuner
