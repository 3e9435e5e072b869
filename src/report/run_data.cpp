// Reads a run directory into the JSON the page draws (report/run_data.h). Each file is read as far
// as it is whole; what is missing or cut becomes a line of `problems`.
#include "run_data.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "meridian/core/clock.h"
#include "meridian/core/error.h"
#include "meridian/report/report.h"

namespace meridian::report {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr size_t kMaxConfigBytes = 256 * 1024;
constexpr size_t kMaxFindings = 500;
constexpr size_t kMaxErrorLines = 40;
constexpr size_t kMaxHeatColumns = 600;

// A finite double as JSON; NaN and infinities (a bad step's loss) as null, which JSON lacks otherwise.
json number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// One curve: (step, value) in the order the run wrote them. A step at or before the last one means
// the run went back to a checkpoint: the abandoned steps after it are dropped (the resumed attempt's
// values win).
struct Curve {
  std::vector<double> x, y;
  void add(double step, double value) {
    while (!x.empty() && x.back() >= step) x.pop_back(), y.pop_back();
    x.push_back(step), y.push_back(value);
  }
};

struct Row {
  int64_t step = 0;
  double wall = 0, value = 0;
  std::string name;
};

// "step,wall_time,name,value"; false for a line that is not one (cut short, or not ours).
bool parse_row(const std::string& line, Row* row) {
  const size_t a = line.find(','), b = a == std::string::npos ? a : line.find(',', a + 1),
               c = b == std::string::npos ? b : line.rfind(',');
  if (c == std::string::npos || c <= b) return false;
  try {
    size_t used = 0;
    row->step = std::stoll(line.substr(0, a), &used);
    if (used != a) return false;
    row->wall = std::stod(line.substr(a + 1, b - a - 1));
    row->name = line.substr(b + 1, c - b - 1);
    const std::string v = line.substr(c + 1);
    if (v == "nan" || v == "-nan")
      row->value = NAN;
    else if (v == "inf" || v == "-inf")
      row->value = v[0] == '-' ? -INFINITY : INFINITY;
    else {
      row->value = std::stod(v, &used);
      if (used != v.size()) return false;
    }
  } catch (const std::exception&) {
    return false;
  }
  return !row->name.empty();
}

// A train step's row: its step and wall time, for the attempts' last steps and the restarts.
struct StepMark {
  int64_t step;
  double wall;
};

void read_metrics(const std::string& dir, json& out, std::vector<std::string>& problems, PageStats& stats,
                  std::vector<StepMark>& train_steps) {
  const std::string path = dir + "/metrics.csv";
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    problems.push_back("metrics.csv is missing: no curves (the run wrote no step yet, or this is not a run directory)");
    return;
  }
  std::map<std::string, Curve> curves;
  std::string line;
  int64_t line_no = 0, bad = 0, first_bad = 0;
  bool cut = false;
  while (std::getline(in, line)) {
    ++line_no;
    if (line_no == 1 && line.rfind("step,", 0) == 0) continue;
    if (in.eof()) cut = true;  // the last line has no newline: the run was stopped while writing it
    Row r;
    if (cut || !parse_row(line, &r)) {
      if (!cut && !bad++) first_bad = line_no;
      continue;
    }
    ++stats.metric_rows;
    curves[r.name].add(double(r.step), r.value);
    if (r.name == "train/loss") {
      if (!train_steps.empty() && train_steps.back().step >= r.step && r.step > 0)
        train_steps.push_back({-1, r.wall});  // a restart: -1 separates the attempts
      train_steps.push_back({r.step, r.wall});
    }
  }
  if (cut)
    problems.push_back("metrics.csv: its last line (line " + std::to_string(line_no) +
                       ") was cut short (a run stopped while writing it, or one still running): left out");
  if (bad)
    problems.push_back("metrics.csv: " + std::to_string(bad) + " line(s) are not step,wall_time,name,value rows " +
                       "(the first is line " + std::to_string(first_bad) + "): left out");
  json series = json::object();
  for (auto& [name, c] : curves) {
    downsample(c.x, c.y);
    stats.points_shown += int64_t(c.x.size());
    json ys = json::array();
    for (double v : c.y) ys.push_back(number(v));
    series[name] = {{"x", c.x}, {"y", ys}};
  }
  out["series"] = std::move(series);
}

// health.jsonl: each rank's step time per report (the heatmap) and the findings.
void read_health(const std::string& dir, json& out, std::vector<std::string>& problems) {
  const std::string path = dir + "/health.jsonl";
  std::ifstream in(path, std::ios::binary);
  json findings = json::array();
  if (!in) {
    problems.push_back(
        "health.jsonl is missing: no per-rank times and no findings (train.health_every 0, a run from before "
        "health reports, or none was due yet)");
    out["heatmap"] = nullptr;
    out["findings"] = findings;
    return;
  }
  std::vector<double> steps;
  std::map<int, std::vector<double>> per_rank;  // rank -> busy seconds per step, per report (NaN where it is absent)
  std::map<int, std::string> hosts;
  std::string line;
  int64_t line_no = 0, bad = 0, first_bad = 0, dropped = 0;
  while (std::getline(in, line)) {
    ++line_no;
    json r = json::parse(line, nullptr, false);
    if (r.is_discarded() || !r.is_object() || !r.contains("step") || !r["step"].is_number()) {
      if (!bad++) first_bad = line_no;
      continue;
    }
    const double step = r["step"].get<double>();
    while (!steps.empty() && steps.back() >= step) {  // a restart: the resumed attempt's reports win
      steps.pop_back();
      for (auto& [rank, v] : per_rank)
        if (v.size() > steps.size()) v.resize(steps.size());
    }
    steps.push_back(step);
    if (r.contains("ranks") && r["ranks"].is_array())
      for (const auto& k : r["ranks"]) {
        if (!k.is_object() || !k.contains("rank") || !k["rank"].is_number_integer()) continue;
        const int rank = k["rank"].get<int>();
        auto& v = per_rank[rank];
        v.resize(steps.size(), NAN);
        // What the rank worked: compute and its own data wait, not the wait for the other ranks (in sync
        // data parallelism every rank's whole step is the slowest one's).
        auto seconds = [&](const char* key) {
          return k.contains(key) && k[key].is_number() ? k[key].get<double>() : NAN;
        };
        v.back() = seconds("compute_s") + seconds("data_s");
        if (k.contains("host") && k["host"].is_string()) hosts[rank] = k["host"].get<std::string>();
      }
    if (r.contains("warnings") && r["warnings"].is_array())
      for (const auto& w : r["warnings"]) {
        if (!w.is_string()) continue;
        if (findings.size() >= kMaxFindings) {
          ++dropped;
          continue;
        }
        const std::string text = w.get<std::string>();
        findings.push_back(
            {{"step", step}, {"time", r.value("time", 0.0)}, {"kind", text.substr(0, text.find(':'))}, {"text", text}});
      }
  }
  if (bad)
    problems.push_back("health.jsonl: " + std::to_string(bad) + " line(s) are not whole reports (the first is line " +
                       std::to_string(first_bad) + "): left out");
  if (dropped)
    problems.push_back("health.jsonl: " + std::to_string(dropped) + " more findings after the first " +
                       std::to_string(kMaxFindings) + " are not shown");
  out["findings"] = std::move(findings);
  if (steps.empty()) {
    out["heatmap"] = nullptr;
    return;
  }
  // At most kMaxHeatColumns columns: each keeps the slowest time of the reports it stands for.
  const size_t n = steps.size(), per = (n + kMaxHeatColumns - 1) / kMaxHeatColumns;
  json heat = {{"steps", json::array()}, {"ranks", json::array()}, {"hosts", json::array()}, {"busy_s", json::array()}};
  for (size_t i = 0; i < n; i += per) heat["steps"].push_back(steps[std::min(n, i + per) - 1]);
  for (auto& [rank, v] : per_rank) {
    v.resize(n, NAN);
    json row = json::array();
    for (size_t i = 0; i < n; i += per) {
      double worst = NAN;
      for (size_t j = i; j < std::min(n, i + per); ++j)
        if (std::isfinite(v[j]) && !(worst >= v[j])) worst = v[j];
      row.push_back(number(worst));
    }
    heat["ranks"].push_back(rank);
    heat["hosts"].push_back(hosts.count(rank) ? hosts[rank] : "?");
    heat["busy_s"].push_back(std::move(row));
  }
  out["heatmap"] = std::move(heat);
}

// attempts.jsonl: each attempt's start and end, with its last step from metrics.csv when it has no
// end (killed), and the steps the next one lost. Without the file, the restarts metrics.csv shows.
void read_attempts(const std::string& dir, json& out, std::vector<std::string>& problems,
                   const std::vector<StepMark>& train_steps) {
  json attempts = json::array();
  std::ifstream in(dir + "/attempts.jsonl", std::ios::binary);
  std::string line;
  int64_t bad = 0;
  while (in && std::getline(in, line)) {
    json r = json::parse(line, nullptr, false);
    if (r.is_discarded() || !r.is_object() || !r.contains("event")) {
      ++bad;
      continue;
    }
    if (r["event"] == "start")
      attempts.push_back({{"start", r}, {"end", nullptr}});
    else if (r["event"] == "end" && !attempts.empty() && attempts.back()["end"].is_null())
      attempts.back()["end"] = r;
  }
  if (bad) problems.push_back("attempts.jsonl: " + std::to_string(bad) + " line(s) are not whole records: left out");
  // The last step each attempt logged, from metrics.csv's train rows by wall time.
  auto last_step_between = [&](double from, double to) {
    int64_t last = -1;
    for (const auto& m : train_steps)
      if (m.step >= 0 && m.wall >= from && m.wall < to) last = std::max(last, m.step);
    return last;
  };
  if (!in.is_open() && !train_steps.empty()) {
    problems.push_back(
        "attempts.jsonl is missing (a run from before meridian recorded its attempts): the restarts below are "
        "inferred from metrics.csv, where the step went back");
    json a = {{"start", {{"time", train_steps.front().wall}, {"inferred", true}}}, {"end", nullptr}};
    for (size_t i = 0; i < train_steps.size(); ++i) {
      if (train_steps[i].step >= 0) continue;
      a["last_step"] = train_steps[i - 1].step;
      attempts.push_back(a);
      const auto& next = train_steps[i + 1];
      a = {{"start", {{"time", next.wall}, {"inferred", true}, {"resumed_from", {{"step", next.step - 1}}}}},
           {"end", nullptr}};
    }
    a["last_step"] = train_steps.back().step;
    attempts.push_back(a);
  }
  for (size_t i = 0; i < attempts.size(); ++i) {
    auto& a = attempts[i];
    const double from = a["start"].value("time", 0.0);
    const double to = i + 1 < attempts.size() ? attempts[i + 1]["start"].value("time", 0.0) : INFINITY;
    if (!a.contains("last_step")) {
      int64_t last = a["end"].is_object() ? a["end"].value("step", int64_t(-1)) : last_step_between(from, to);
      a["last_step"] = last >= 0 ? json(last) : json(nullptr);
    }
    if (i == 0) continue;
    const auto& resumed = a["start"].contains("resumed_from") ? a["start"]["resumed_from"] : json(nullptr);
    const int64_t at = resumed.is_object() ? resumed.value("step", int64_t(0)) : 0;
    const json& before = attempts[i - 1]["last_step"];
    if (before.is_number_integer()) a["lost"] = std::max<int64_t>(0, before.get<int64_t>() - at);
    // A grow-back: more ranks than the attempt before, on hosts it did not have ("rejoined").
    const json& prev = attempts[i - 1]["start"];
    const auto hosts_of = [](const json& start) {
      std::set<std::string> out;
      if (start.contains("hosts") && start["hosts"].is_array())
        for (const auto& h : start["hosts"])
          if (h.is_string()) out.insert(h.get<std::string>());
      return out;
    };
    const auto had = hosts_of(prev), has = hosts_of(a["start"]);
    const auto ranks = [](const json& start) {
      return start.contains("world_size") && start["world_size"].is_number_integer()
                 ? start["world_size"].get<int64_t>()
                 : int64_t(0);
    };
    const int64_t ranks_before = ranks(prev), ranks_now = ranks(a["start"]);
    json joined = json::array();
    for (const auto& h : has)
      if (!had.count(h)) joined.push_back(h);
    if (!had.empty() && !joined.empty() && ranks_now > ranks_before)
      a["rejoined"] = {{"hosts", joined}, {"from", ranks_before}, {"to", ranks_now}};
  }
  out["attempts"] = std::move(attempts);
}

void read_config(const std::string& dir, json& out, std::vector<std::string>& problems) {
  std::ifstream in(dir + "/config.yaml", std::ios::binary);
  if (!in) {
    problems.push_back("config.yaml is missing: the config is not shown");
    out["config"] = nullptr;
    return;
  }
  std::string text(kMaxConfigBytes + 1, '\0');
  in.read(text.data(), std::streamsize(text.size()));
  text.resize(size_t(in.gcount()));
  if (text.size() > kMaxConfigBytes) {
    text.resize(kMaxConfigBytes);
    problems.push_back("config.yaml is over 256 KB: only its start is shown");
  }
  out["config"] = text;  // invalid UTF-8 is replaced when the page's JSON is written
}

void read_checkpoints(const std::string& dir, json& out) {
  json list = json::array();
  std::error_code ec;
  const fs::path ckpts = fs::path(dir) / "checkpoints";
  std::vector<fs::directory_entry> files;
  for (const auto& e : fs::directory_iterator(ckpts, ec))
    if (e.path().extension() == ".h5") files.push_back(e);
  std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) { return a.path() < b.path(); });
  std::string latest;
  if (std::ifstream l(ckpts / "latest"); l) std::getline(l, latest);
  static const std::regex step_name(R"(step_0*(\d+)\.h5)");
  for (const auto& e : files) {
    const std::string name = e.path().filename().string();
    std::smatch m;
    const auto bytes = e.file_size(ec);
    if (ec) continue;  // removed by retention while listed
    json c = {{"name", name}, {"bytes", double(bytes)}};
    // At most 18 digits: within stoll's range (a longer name is listed without a step).
    if (std::regex_match(name, m, step_name) && m[1].length() < 19) c["step"] = std::stoll(m[1]);
    struct stat st {};
    if (stat(e.path().c_str(), &st) == 0) c["time"] = double(st.st_mtim.tv_sec);
    if (!latest.empty() && fs::path(latest).filename() == name) c["latest"] = true;
    list.push_back(std::move(c));
  }
  out["checkpoints"] = std::move(list);
}

// Error lines of the rank logs (why an attempt ended), at most kMaxErrorLines, newest last.
void read_errors(const std::string& dir, json& out) {
  std::vector<std::string> lines;
  std::error_code ec;
  std::vector<fs::path> logs;
  for (const auto& e : fs::directory_iterator(fs::path(dir) / "logs", ec))
    if (e.path().extension() == ".log") logs.push_back(e.path());
  std::sort(logs.begin(), logs.end());
  for (const auto& path : logs) {
    std::ifstream in(path, std::ios::binary);
    std::string line;
    while (std::getline(in, line))
      if (line.find("] [error] ") != std::string::npos || line.find("] [critical] ") != std::string::npos) {
        lines.push_back(path.filename().string() + ": " + line.substr(0, 2000));
        if (lines.size() > kMaxErrorLines) lines.erase(lines.begin());
      }
  }
  out["errors"] = lines;
}

}  // namespace

json read_run(const std::string& dir, PageStats& stats) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw UserError("'" + dir + "' is not a directory (give a run directory)");
  json out = json::object();
  std::vector<std::string> problems;
  std::vector<StepMark> train_steps;
  out["run"] = fs::absolute(dir).lexically_normal().string();
  out["generated"] = unix_seconds();
  // Each file on its own: one that holds what no reader foresaw (a field of another type, a file
  // removed while listed) is named on the page and the others are still shown.
  const auto guarded = [&](const char* what, const std::function<void()>& read) {
    try {
      read();
    } catch (const std::exception& e) {
      problems.push_back(std::string(what) + " could not be read: " + e.what());
    }
  };
  guarded("metrics.csv", [&] { read_metrics(dir, out, problems, stats, train_steps); });
  guarded("health.jsonl", [&] { read_health(dir, out, problems); });
  guarded("attempts.jsonl", [&] { read_attempts(dir, out, problems, train_steps); });
  guarded("config.yaml", [&] { read_config(dir, out, problems); });
  guarded("checkpoints/", [&] { read_checkpoints(dir, out); });
  guarded("logs/", [&] { read_errors(dir, out); });
  stats.problems = problems;
  out["problems"] = problems;
  return out;
}

}  // namespace meridian::report
