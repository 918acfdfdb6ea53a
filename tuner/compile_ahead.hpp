// Compilation ahead of the benchmark: while the GPU measures one variant, a
// process of its own compiles the ones that come next, on several threads,
// into the on-disk binary cache, so the runner finds them compiled. It is a
// process, not threads of this one, so that this process stays single-
// threaded and can fork fresh workers (tuner/isolated_runner.hpp) safely.
#pragma once
#include <sys/types.h>

#include <vector>

#include "templates/family.hpp"

namespace ktune::tuner {

class CompileAhead {
 public:
  /// Starts compiling `configs` (in order) of `family` for `problem` and
  /// `arch` on `threads` threads. Failures are left for the runner to report.
  CompileAhead(const templates::Family& family, const templates::Problem& problem, const std::vector<Config>& configs,
               const std::string& arch, unsigned threads);
  /// Stops the compiling process (what it finished stays cached).
  ~CompileAhead();
  CompileAhead(const CompileAhead&) = delete;
  CompileAhead& operator=(const CompileAhead&) = delete;

  /// Blocks until every config has been compiled.
  void wait();

 private:
  pid_t pid_ = -1;
};

}  // namespace ktune::tuner
