#include "meridian/comm/watchdog.h"

#include <algorithm>

namespace meridian::comm {

Watchdog::Watchdog(double timeout_s, Handler on_expired)
    : timeout_s_(timeout_s), on_expired_(std::move(on_expired)), thread_([this] { run(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

uint64_t Watchdog::begin(std::string description) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  pending_.emplace(id, Entry{std::move(description), Clock::now()});
  // No notify: the thread wakes on its own every period. Waking it per operation would cost a
  // context switch per collective on busy cores.
  return id;
}

void Watchdog::end(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.erase(id);
}

void Watchdog::run() {
  // Poll often enough that a short timeout (tests use 1-2 s) fires promptly, rarely enough to cost nothing.
  const auto period = std::chrono::duration<double>(std::clamp(timeout_s_ / 20.0, 0.01, 1.0));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, period, [&] { return stop_; });
    if (stop_ || fired_) continue;
    const auto now = Clock::now();
    for (const auto& [id, entry] : pending_) {
      const double elapsed = std::chrono::duration<double>(now - entry.start).count();
      if (elapsed >= timeout_s_) {
        fired_ = true;
        const std::string description = entry.description;
        lock.unlock();
        on_expired_(description, elapsed);  // normally does not return (abort_job)
        lock.lock();
        break;
      }
    }
  }
}

}  // namespace meridian::comm
