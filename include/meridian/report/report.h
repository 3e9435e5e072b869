// The run report: one self-contained HTML page of a run directory (`meridian report`, and
// RUN_DIR/report.html that `meridian train` keeps up to date), and the record of a run's attempts
// it reads the restarts from. Nothing here is collective; only rank 0 calls it.
//
// The page reads what the run directory holds, whatever is missing or cut short:
//   metrics.csv     the curves (train/*, eval/*), the time per phase, bad steps, epochs
//   health.jsonl    each rank's step time (the heatmap) and the health findings
//   attempts.jsonl  each attempt's start (world, hosts, devices, versions, resume point) and end
//   config.yaml     the resolved config, shown as text
//   checkpoints/    the checkpoint files
//   logs/rank_*.log error lines
// What is missing or cut is said on the page. Text from these files is data, never markup: the page
// puts it in with textContent, and its JSON is inlined with '<' escaped. The chart library (uPlot,
// vendored under src/report/vendor) and the page's script are inlined: the page fetches nothing.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace meridian::report {

// attempts.jsonl: one JSON object per line, appended by rank 0 of `meridian train`:
//   {"event":"start","time":T,"step":S,"steps":N,"world_size":W,"nodes":K,"hosts":[...],"devices":[...],
//    "versions":{...},"task":"...","global_batch":B,"data":"...","resumed_from":{"path":P,"step":S}|null}
//   {"event":"end","time":T,"step":S,"status":"finished|stopped|signalled|early stop|failed","message":"...",
//    "best":{"metric":M,"value":V,"step":S}|absent}
// An attempt with a start and no end was killed (or is still running).
// Appends `record` as one line; SystemError naming the file when it cannot.
void append_attempt(const std::string& run_dir, const nlohmann::json& record);

struct PageStats {
  size_t bytes = 0;                   // of the page
  int64_t metric_rows = 0;            // metrics.csv rows read
  int64_t points_shown = 0;           // after downsampling (each curve keeps its extremes)
  std::vector<std::string> problems;  // what is missing or cut, as the page says it
};

// The page of `run_dir` (not collective; reads only). Never throws for what the run directory holds
// or lacks (the page names it); UserError when `run_dir` is not a directory.
std::string render_page(const std::string& run_dir, PageStats* stats = nullptr);

// render_page written atomically to `out` (a reader never sees half a page). SystemError naming the
// file when it cannot be written.
PageStats write_page(const std::string& run_dir, const std::string& out);

// Largest number of points a curve keeps on the page; above it, each bucket keeps its minimum and
// maximum (the extremes survive).
constexpr size_t kMaxPoints = 2000;

// Keeps at most about kMaxPoints of (x, y), in order: the first, the last, and each bucket's lowest
// and highest y. Exposed for tests.
void downsample(std::vector<double>& x, std::vector<double>& y, size_t max_points = kMaxPoints);

// Rank 0 of `meridian train`: RUN_DIR/report.html rewritten on a thread of its own, so that no step
// waits for it, at the lowest priority (nice 19: a rank on the same core keeps about 98.5 % of it).
// request() starts a write, or, while one runs, one more after it; finish() waits for them and writes
// the final page. A page that cannot be written is a warning in the log: the report never ends a
// run. Not thread-safe (one owner thread calls request and finish).
class PageWriter {
 public:
  explicit PageWriter(std::string run_dir);
  ~PageWriter();  // finish() without the final page
  void request();
  // The final page, written on the caller's thread once the background writes are done; its path, or
  // "" when it could not be written.
  std::string finish();

 private:
  void loop();
  void stop();  // ends the thread after the write in progress
  bool write_now();
  std::string dir_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool pending_ = false, quit_ = false;
  std::thread thread_;
};

}  // namespace meridian::report
