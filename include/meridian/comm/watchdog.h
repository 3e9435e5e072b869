// Watchdog for operations that can hang (collectives, communicator setup).
//
// begin() registers an operation with a description; end() removes it. A background thread checks
// the registered operations; one still running after `timeout_s` triggers on_expired(description,
// elapsed_s) exactly once (the communicators pass a handler that calls abort_job, which ends the job).
// Thread-safe; not collective.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace meridian::comm {

class Watchdog {
 public:
  using Handler = std::function<void(const std::string& description, double elapsed_s)>;

  Watchdog(double timeout_s, Handler on_expired);
  ~Watchdog();  // stops the thread; pending operations are forgotten
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  uint64_t begin(std::string description);
  void end(uint64_t id);
  double timeout_s() const { return timeout_s_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    std::string description;
    Clock::time_point start;
  };
  void run();

  const double timeout_s_;
  Handler on_expired_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Entry> pending_;
  uint64_t next_id_ = 1;
  bool stop_ = false;
  bool fired_ = false;
  std::thread thread_;
};

}  // namespace meridian::comm
