// A fixed pool of worker threads running submitted jobs in FIFO order.
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "base/env.hpp"
#include "base/error.hpp"

namespace ktune {

class ThreadPool {
 public:
  /// Starts `threads` workers (checked by env::check_thread_count, so 0 or
  /// more than env::kMaxThreads is kInvalidInput). When the system refuses a
  /// thread, the ones already started are stopped and joined, and the
  /// constructor throws kInvalidInput naming how many could be started: a
  /// pool is either whole or not there, never half-built and unjoinable.
  explicit ThreadPool(unsigned threads) {
    env::check_thread_count(threads, "thread pool size");
    workers_.reserve(threads);
    try {
      for (unsigned i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
    } catch (const std::system_error& e) {
      const auto started = workers_.size();
      stop();
      throw_error(ErrorKind::kInvalidInput, "cannot start " + std::to_string(threads) + " threads (the system refused "
                                                "one after " + std::to_string(started) + ": " + e.what() +
                                                "); ask for fewer");
    }
  }
  ~ThreadPool() { stop(); }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// Queues `fn`; the future carries its result or exception.
  template <class Fn>
  auto submit(Fn fn) -> std::future<decltype(fn())> {
    auto task = std::make_shared<std::packaged_task<decltype(fn())()>>(std::move(fn));
    auto future = task->get_future();
    {
      std::lock_guard lock(mutex_);
      jobs_.emplace_back([task] { (*task)(); });
    }
    cv_.notify_one();
    return future;
  }

  unsigned size() const { return static_cast<unsigned>(workers_.size()); }

 private:
  // Lets the workers finish the queued jobs and joins every started one.
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_)
      if (w.joinable()) w.join();
    workers_.clear();
  }

  void work() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  std::vector<std::thread> workers_;
  std::deque<std::function<void()>> jobs_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
};

}  // namespace ktune
