// Splits a loop over threads: the calling thread takes the first chunk and a
// pool of threads-1 workers the others (base/thread_pool.hpp).
#pragma once
#include <algorithm>
#include <cstdint>
#include <future>
#include <memory>
#include <vector>

#include "base/thread_pool.hpp"

namespace ktune::model {

class Parallel {
 public:
  /// `threads` >= 1 counts the calling thread.
  explicit Parallel(unsigned threads) : threads_(std::max(1u, threads)) {
    if (threads_ > 1) pool_ = std::make_unique<ThreadPool>(threads_ - 1);
  }

  unsigned threads() const { return threads_; }

  /// Calls fn(begin, end, chunk) on up to threads() contiguous chunks of
  /// [0, n); chunk < threads() indexes per-thread scratch. Rethrows the first
  /// exception after every chunk has finished.
  template <class Fn>
  void for_range(std::int64_t n, Fn&& fn) {
    if (n <= 0) return;
    const std::int64_t chunks = std::min<std::int64_t>(threads_, n);
    if (chunks == 1) {
      fn(std::int64_t{0}, n, 0u);
      return;
    }
    std::vector<std::future<void>> pending;
    pending.reserve(chunks - 1);
    for (std::int64_t c = 1; c < chunks; ++c) {
      const std::int64_t begin = n * c / chunks, end = n * (c + 1) / chunks;
      pending.push_back(pool_->submit([&fn, begin, end, c] { fn(begin, end, static_cast<unsigned>(c)); }));
    }
    std::exception_ptr error;
    try {
      fn(std::int64_t{0}, n / chunks, 0u);
    } catch (...) {
      error = std::current_exception();
    }
    for (auto& f : pending) {
      try {
        f.get();
      } catch (...) {
        if (!error) error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
  }

 private:
  unsigned threads_;
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace ktune::model
