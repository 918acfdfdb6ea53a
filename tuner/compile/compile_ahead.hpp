// Compilation ahead of the benchmark: while the GPU measures one variant, a
// process of its own compiles the variants the strategy expects to propose
// next (search::Strategy::upcoming), on several threads, into the on-disk
// binary cache, so the runner finds them compiled. It is a process, not
// threads of this one, so that this process stays single-threaded and can
// fork fresh workers (tuner/isolated_runner.hpp) safely.
#pragma once
#include <sys/types.h>

#include <set>
#include <string>
#include <vector>

#include "templates/family.hpp"

namespace ktune::tuner {

class CompileAhead {
 public:
  /// Starts the compiling process for `family`, `problem` and `arch` with
  /// `threads` compiling threads; it waits for configs from add().
  CompileAhead(const templates::Family& family, const templates::Problem& problem, const std::string& arch,
               unsigned threads);
  /// Stops the compiling process (what it finished stays cached).
  ~CompileAhead();
  CompileAhead(const CompileAhead&) = delete;
  CompileAhead& operator=(const CompileAhead&) = delete;

  /// Queues `configs`, in order, ahead of everything queued before (the
  /// newest hint is the likeliest); a config queued once is not queued again.
  /// Failures are left for the runner to report.
  void add(const std::vector<Config>& configs);
  /// Configs queued so far.
  std::size_t queued() const { return sent_.size(); }
  /// Whether the compiling process is still there: it may not have started,
  /// died, or stopped because the binary cache did not keep a compile.
  bool compiling();
  /// Blocks until every queued config has been compiled.
  void wait();

 private:
  pid_t pid_ = -1;
  int fd_ = -1;  ///< our end of the socket the configs travel on
  std::set<Config> sent_;
};

}  // namespace ktune::tuner
