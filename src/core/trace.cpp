#include "meridian/core/trace.h"

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "meridian/core/error.h"

namespace meridian::core {

Trace::Trace(int rank) : rank_(rank), origin_(Clock::now()) {}

void Trace::span(const std::string& name, const std::string& category, Clock::time_point start, Clock::time_point end,
                 const std::string& lane) {
  const auto us = [&](Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::microseconds>(t - origin_).count();
  };
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back({name, category, lane, us(start), std::max<int64_t>(0, us(end) - us(start))});
}

std::string Trace::events_json() const {
  nlohmann::json events = nlohmann::json::array();
  std::map<std::string, int> lanes;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& e : events_) {
    const int tid = lanes.emplace(e.lane, int(lanes.size())).first->second;
    events.push_back({{"name", e.name},
                      {"cat", e.category},
                      {"ph", "X"},
                      {"ts", e.ts_us},
                      {"dur", e.dur_us},
                      {"pid", rank_},
                      {"tid", tid}});
  }
  events.push_back(
      {{"name", "process_name"}, {"ph", "M"}, {"pid", rank_}, {"args", {{"name", "rank " + std::to_string(rank_)}}}});
  for (const auto& [lane, tid] : lanes)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", tid}, {"args", {{"name", lane}}}});
  return events.dump();
}

void Trace::write(const std::string& path, const std::vector<std::string>& events_of_ranks) {
  nlohmann::json all = nlohmann::json::array();
  for (const auto& text : events_of_ranks)
    for (auto& e : nlohmann::json::parse(text)) all.push_back(std::move(e));
  std::ofstream out(path);
  if (!(out << nlohmann::json{{"traceEvents", all}, {"displayTimeUnit", "ms"}}.dump() << "\n"))
    throw UserError(path + ": cannot write the trace file");
}

Trace::Scope::Scope(Trace* trace, std::string name, std::string category, std::string lane)
    : trace_(trace),
      name_(std::move(name)),
      category_(std::move(category)),
      lane_(std::move(lane)),
      start_(Clock::now()) {}

Trace::Scope::~Scope() {
  if (trace_) trace_->span(name_, category_, start_, Clock::now(), lane_);
}

}  // namespace meridian::core
