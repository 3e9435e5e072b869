// Private to data/: a bounded FIFO between the threads of a loader's pipeline (pipeline.h) and its
// consumer; close() wakes everyone (push then returns false, pop returns false once the queue is
// empty); clear() drops what is queued and wakes a producer waiting for room.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>

namespace meridian::data {

template <typename T>
class Channel {
 public:
  explicit Channel(size_t capacity) : capacity_(std::max<size_t>(1, capacity)) {}
  bool push(T item) {
    std::unique_lock<std::mutex> lock(mu_);
    not_full_.wait(lock, [&] { return closed_ || q_.size() < capacity_; });
    if (closed_) return false;
    q_.push_back(std::move(item));
    not_empty_.notify_one();
    return true;
  }
  bool pop(T& item) {
    std::unique_lock<std::mutex> lock(mu_);
    not_empty_.wait(lock, [&] { return closed_ || !q_.empty(); });
    if (q_.empty()) return false;
    item = std::move(q_.front());
    q_.pop_front();
    not_full_.notify_one();
    return true;
  }
  // Drops what is queued (destroyed outside the lock); the channel stays open.
  void clear() {
    std::deque<T> dropped;
    {
      std::lock_guard<std::mutex> lock(mu_);
      dropped.swap(q_);
      not_full_.notify_all();
    }
  }
  void close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    not_empty_.notify_all();
    not_full_.notify_all();
  }

 private:
  size_t capacity_;
  std::mutex mu_;
  std::condition_variable not_empty_, not_full_;
  std::deque<T> q_;
  bool closed_ = false;
};

}  // namespace meridian::data
