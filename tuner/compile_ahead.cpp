#include "tuner/compile_ahead.hpp"

namespace ktune::tuner {

CompileAhead::CompileAhead(const templates::Family& family, const templates::Problem& problem,
                           std::vector<Config> configs, std::string arch, unsigned threads)
    : family_(family), problem_(problem), configs_(std::move(configs)), arch_(std::move(arch)) {
  for (unsigned i = 0; i < std::max(1u, threads); ++i) threads_.emplace_back([this] { work(); });
}

CompileAhead::~CompileAhead() {
  stop_ = true;
  wait();
}

void CompileAhead::wait() {
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

void CompileAhead::work() {
  for (;;) {
    if (stop_) return;
    const std::size_t i = next_++;
    if (i >= configs_.size()) return;
    try {
      compiler_.compile(family_.render(configs_[i], problem_), arch_);
    } catch (const std::exception&) {
      // The runner compiles it again and reports the failure as a result.
    }
    ++compiled_;
  }
}

}  // namespace ktune::tuner
