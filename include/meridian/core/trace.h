// Step timeline as a Chrome trace (chrome://tracing, Perfetto): complete events with a name, a
// category and a thread lane. Thread-safe; events are kept in memory until write().
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace meridian::core {

class Trace {
 public:
  explicit Trace(int rank);
  using Clock = std::chrono::steady_clock;

  // A span [start, end) in lane `lane` (e.g. "compute", "comm").
  void span(const std::string& name, const std::string& category, Clock::time_point start, Clock::time_point end,
            const std::string& lane);
  // The events as a JSON array (Chrome trace events, pid = rank, one tid per lane).
  std::string events_json() const;
  // Writes {"traceEvents": [...]} with the events of several ranks (each from events_json()) to
  // `path`; throws UserError naming the file if it cannot.
  static void write(const std::string& path, const std::vector<std::string>& events_of_ranks);

  // Records a span from construction to destruction.
  class Scope {
   public:
    Scope(Trace* trace, std::string name, std::string category, std::string lane = "compute");
    ~Scope();

   private:
    Trace* trace_;
    std::string name_, category_, lane_;
    Clock::time_point start_;
  };

 private:
  struct Event {
    std::string name, category, lane;
    int64_t ts_us, dur_us;
  };
  int rank_;
  Clock::time_point origin_;
  mutable std::mutex mu_;
  std::vector<Event> events_;
};

}  // namespace meridian::core
