// Private to data/: the decode threads of a loader (`data.workers`). for_each runs fn(i, worker)
// for i in [0, count) on the pool's threads and the calling thread together, and returns when all
// are done; `worker` (0 = the caller, 1..threads) lets each thread keep its own state (a JPEG
// handle). The first exception thrown by fn is rethrown by for_each after every call has ended.
// One for_each at a time (the loader's finish thread is the only caller).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace meridian::data {

class WorkerPool {
 public:
  explicit WorkerPool(int threads) {  // threads besides the caller; 0 = the caller alone
    for (int t = 0; t < threads; ++t) threads_.emplace_back([this, t] { loop(t + 1); });
  }
  ~WorkerPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    start_.notify_all();
    for (auto& t : threads_) t.join();
  }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int workers() const { return int(threads_.size()) + 1; }

  void for_each(int64_t count, const std::function<void(int64_t i, int worker)>& fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = &fn, count_ = count, next_ = 0, busy_ = int(threads_.size()), error_ = nullptr, ++generation_;
    }
    start_.notify_all();
    work(0);
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return busy_ == 0; });
    fn_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void loop(int worker) {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        start_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      work(worker);
      std::lock_guard<std::mutex> lock(mu_);
      if (--busy_ == 0) done_.notify_all();
    }
  }

  // Takes indices until none is left (or one call failed).
  void work(int worker) {
    for (;;) {
      int64_t i;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (next_ >= count_ || error_) return;
        i = next_++;
      }
      try {
        (*fn_)(i, worker);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
      }
    }
  }

  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<void(int64_t, int)>* fn_ = nullptr;
  int64_t count_ = 0, next_ = 0;
  int busy_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> threads_;
};

}  // namespace meridian::data
