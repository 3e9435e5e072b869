// Private to comm/: the pieces both backends share.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>

#include "meridian/comm/communicator.h"

namespace meridian::comm::detail {

// Adds to blocked_seconds() (communicator.h).
void add_blocked(std::chrono::steady_clock::duration d);

// A Work completed by a progress thread calling mark_done().
class CompletionWork : public Work {
 public:
  void wait() override { synchronize(); }
  void synchronize() override {
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    lock.unlock();
    add_blocked(std::chrono::steady_clock::now() - t0);
    after_completion();
  }
  bool wait_for(std::chrono::duration<double> timeout) override {
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    const bool done = cv_.wait_for(lock, timeout, [&] { return done_; });
    lock.unlock();
    add_blocked(std::chrono::steady_clock::now() - t0);
    if (!done) return false;
    after_completion();
    return true;
  }
  bool is_completed() override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  std::chrono::steady_clock::time_point completed_at() override {
    std::lock_guard<std::mutex> lock(mu_);
    return completed_at_;
  }
  void mark_done() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      completed_at_ = std::chrono::steady_clock::now();
    }
    cv_.notify_all();
  }

 protected:
  // Runs on the waiting thread once the operation is complete (NCCL: order the current stream after it).
  virtual void after_completion() {}

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::chrono::steady_clock::time_point completed_at_{};
};

// The communicators' watchdog handler: ends the job with a message naming the operation, the
// backend, the timeout, the elapsed time, the rank and the host.
std::function<void(const std::string&, double)> watchdog_abort(const char* backend, double timeout_s);

// "allreduce(sum) float32[1048576] 4194304 bytes"
std::string describe(const char* collective, const at::Tensor& tensor, const char* detail = nullptr);

// Throws std::invalid_argument unless `t` is contiguous and on `device_type`.
void check_tensor(const at::Tensor& t, c10::DeviceType device_type, const char* collective, const char* name);
// Throws std::invalid_argument unless big.numel() == parts * small.numel() and dtypes match.
void check_split(const at::Tensor& big, const at::Tensor& small, int parts, const char* collective);
// Throws std::invalid_argument for Avg on a non-floating tensor.
void check_reduce(const at::Tensor& t, ReduceOp op, const char* collective);

}  // namespace meridian::comm::detail
