// The report page: the run's JSON, the page's script and style and uPlot inlined into page.html.
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>

#include "meridian/core/error.h"
#include "meridian/core/files.h"
#include "meridian/report/report.h"
#include "report_assets.h"
#include "run_data.h"

namespace meridian::report {

namespace {

std::string asset(const Asset& a) { return std::string(a.data, a.size); }

// JSON that is safe inside <script type="application/json">: no '<', '>' or '&' can end the element
// or start markup (each becomes its \u escape, which JSON.parse reads back).
std::string inline_json(const nlohmann::json& data) {
  const std::string text = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size() + text.size() / 16);
  for (char c : text) {
    if (c == '<')
      out += "\\u003c";
    else if (c == '>')
      out += "\\u003e";
    else if (c == '&')
      out += "\\u0026";
    else
      out += c;
  }
  return out;
}

void replace_once(std::string& text, const std::string& key, const std::string& value) {
  const size_t at = text.find(key);
  if (at == std::string::npos) throw std::logic_error("report page template lacks " + key);
  text.replace(at, key.size(), value);
}

}  // namespace

void downsample(std::vector<double>& x, std::vector<double>& y, size_t max_points) {
  const size_t n = x.size();
  if (n <= max_points || max_points < 4) return;
  const size_t buckets = (max_points - 2) / 2, per = (n - 2 + buckets - 1) / buckets;
  std::vector<double> ox{x[0]}, oy{y[0]};
  for (size_t b = 1; b < n - 1; b += per) {
    const size_t e = std::min(n - 1, b + per);
    size_t lo = b, hi = b;  // NaN (a bad step) is kept as the bucket's extreme: it is what to see
    for (size_t i = b; i < e; ++i) {
      if (std::isnan(y[i]) || y[i] < y[lo]) lo = i;
      if (std::isnan(y[i]) || y[i] > y[hi]) hi = i;
    }
    ox.push_back(x[std::min(lo, hi)]), oy.push_back(y[std::min(lo, hi)]);
    if (lo != hi) ox.push_back(x[std::max(lo, hi)]), oy.push_back(y[std::max(lo, hi)]);
  }
  ox.push_back(x[n - 1]), oy.push_back(y[n - 1]);
  x.swap(ox), y.swap(oy);
}

std::string render_page(const std::string& run_dir, PageStats* stats) {
  PageStats local;
  PageStats& s = stats ? *stats : local;
  const nlohmann::json data = read_run(run_dir, s);
  std::string page = asset(kPageHtml);
  replace_once(page, "/*STYLE*/", asset(kUplotCss) + "\n" + asset(kPageCss));
  replace_once(page, "/*UPLOT*/", asset(kUplotJs));
  replace_once(page, "/*SCRIPT*/", asset(kPageJs));
  replace_once(page, "/*DATA*/", inline_json(data));
  s.bytes = page.size();
  return page;
}

PageStats write_page(const std::string& run_dir, const std::string& out) {
  PageStats stats;
  const std::string page = render_page(run_dir, &stats);
  // A temporary name of this process and call: `meridian report` on a running run writes the same
  // page as its trainer's PageWriter may be writing.
  static std::atomic<int> serial{0};
  write_file_atomically(out, page, ".tmp." + std::to_string(getpid()) + "." + std::to_string(serial++));
  return stats;
}

void append_attempt(const std::string& run_dir, const nlohmann::json& record) {
  const std::string path = run_dir + "/attempts.jsonl";
  std::ofstream f(path, std::ios::app);
  f << record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  if (!f.flush()) throw SystemError("cannot write '" + path + "' (disk full?)");
}

PageWriter::PageWriter(std::string run_dir) : dir_(std::move(run_dir)), thread_([this] { loop(); }) {}

PageWriter::~PageWriter() { stop(); }

void PageWriter::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;  // a write in progress ends first; none that is pending starts
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PageWriter::request() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ = true;
  }
  cv_.notify_all();
}

void PageWriter::loop() {
  // The lowest priority (nice 19: about 1.5 % of a core that a rank also wants): the page must not
  // slow a step on a core it shares with a rank. Linux applies setpriority to this thread alone.
  setpriority(PRIO_PROCESS, pid_t(syscall(SYS_gettid)), 19);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return pending_ || quit_; });
    if (quit_) return;
    pending_ = false;
    lock.unlock();
    write_now();
    lock.lock();
  }
}

bool PageWriter::write_now() {
  const std::string out = dir_ + "/report.html";
  try {
    write_page(dir_, out);
    return true;
  } catch (const std::exception& e) {
    spdlog::warn("report: {} not written: {}", out, e.what());
    return false;
  }
}

std::string PageWriter::finish() {
  stop();
  return write_now() ? dir_ + "/report.html" : "";
}

}  // namespace meridian::report
