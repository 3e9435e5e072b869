// Choosing where a run resumes: the checkpoints of a directory, their verification, the config
// comparison and the batch of an elastic resume.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <regex>
#include <sstream>

#include "internal.h"
#include "meridian/ckpt/files.h"
#include "meridian/comm/agree.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"

namespace meridian::ckpt {

std::string step_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%08lld.h5", (long long)step);
  return name;
}

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  static const std::regex pattern(R"(step_(\d{8,})\.h5)");
  for (const auto& name : files().list(dir)) {
    std::smatch m;
    if (std::regex_match(name, m, pattern)) out.emplace_back(std::stoll(m[1].str()), dir + "/" + name);
  }
  std::sort(out.rbegin(), out.rend());
  return out;
}

ResumePoint read_resume_point(const std::string& path, bool verify) {
  Reader r(path);
  if (verify) r.verify();
  ResumePoint p;
  p.path = path;
  auto need = [&](const char* name) {
    const auto v = r.int_attribute(name);
    if (!v) throw DataError(path, std::string("attribute '") + name + "'", "missing");
    return *v;
  };
  p.step = need("step");
  p.epoch = need("epoch");
  p.position = need("position");
  p.global_batch = need("global_batch");
  p.world_size = need("world_size");
  p.config_yaml = r.string_attribute("config").value_or("");
  return p;
}

std::optional<ResumePoint> find_resumable(const std::string& dir, std::vector<std::string>* rejected) {
  // The one `latest` names first (the newest this run wrote), then every other by step, newest first.
  auto candidates = list_checkpoints(dir);
  std::istringstream latest_file(files().read_small(dir + "/latest").value_or(""));
  std::string latest;
  if (latest_file >> latest) {
    const std::string path = dir + "/" + latest;
    const auto it = std::find_if(candidates.begin(), candidates.end(), [&](const auto& c) { return c.second == path; });
    if (it != candidates.end()) std::rotate(candidates.begin(), it, it + 1);
  }
  for (const auto& [step, path] : candidates) {
    try {
      return read_resume_point(path, /*verify=*/true);
    } catch (const std::exception& e) {
      if (rejected) rejected->push_back(path + ": " + e.what());
    }
  }
  return std::nullopt;
}

std::optional<ResumePoint> choose_resume_point(const comm::Runtime& rt, const std::string& resume,
                                               const std::string& dir, std::vector<std::string>* skipped) {
  if (resume.empty()) return std::nullopt;
  std::string chosen;
  comm::agree(
      rt,
      [&] {
        if (rt.rank() != 0) return;
        if (resume == "auto") {
          std::vector<std::string> rejected;
          const auto point = find_resumable(dir, &rejected);
          for (const auto& r : rejected) spdlog::warn("resume: skipping {}", r);
          if (skipped) *skipped = rejected;
          if (point)
            chosen = point->path;
          else
            spdlog::info("resume auto: no checkpoint in '{}'; starting from scratch", dir);
        } else {
          chosen = read_resume_point(resume, /*verify=*/true).path;
        }
        if (chosen.empty()) return;
        // Checkpoints of this run newer than the one resumed from belong to an abandoned branch (or
        // are corrupt): moved aside, so that neither retention nor a later --resume auto picks them.
        const int64_t from = read_resume_point(chosen, /*verify=*/false).step;
        for (const auto& [step, path] : list_checkpoints(dir))
          if (step > from) {
            files().rename(path, path + ".abandoned");
            spdlog::warn("resume: {} is newer than the checkpoint resumed from: renamed to {}.abandoned", path, path);
          }
      },
      [&](const comm::Failure& f) { throw UserError("--resume " + resume + ": " + f.message); });
  chosen = rt.allgather(chosen)[0];
  if (chosen.empty()) return std::nullopt;
  return read_resume_point(chosen, /*verify=*/false);  // every rank reads the header (rank 0 verified)
}

int64_t resume_batch(const ResumePoint& point, int world_size, int64_t accumulate, int64_t batch) {
  const int64_t ways = int64_t(world_size) * accumulate;
  if (batch * ways == point.global_batch) return batch;
  if (point.global_batch % ways != 0)
    throw UserError(point.path + ": its global batch " + std::to_string(point.global_batch) + " does not divide into " +
                    std::to_string(world_size) + " ranks x train.accumulate " + std::to_string(accumulate));
  return point.global_batch / ways;
}

std::vector<std::string> compare_configs(const Config& saved, const Config& current, const std::string& path) {
  std::vector<std::string> keys = saved.leaf_keys();
  for (const auto& k : current.leaf_keys())
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  std::vector<std::string> fatal, harmless;
  for (const auto& k : keys) {
    std::string a = saved.text(k), b = current.text(k);
    if (a == b) continue;
    const std::string line = k + ": " + (a.empty() ? "<unset>" : a) + " -> " + (b.empty() ? "<unset>" : b);
    // The model's shape and the loss define what the tensors mean; the seed defines the data order.
    // (Whether the optimizer state loads is the strategy's to say: Strategy::load.)
    const bool matters = k.rfind("model.", 0) == 0 || k == "task.name" || k == "task.loss" || k == "train.seed";
    (matters ? fatal : harmless).push_back(line);
  }
  if (!fatal.empty()) {
    std::string msg = path + ": the checkpoint was trained with another model, loss or seed; differences:";
    for (const auto& f : fatal) msg += "\n  " + f;
    throw UserError(msg);
  }
  return harmless;
}

Config saved_config(const Reader& reader) {
  return Config::parse(reader.string_attribute("config").value_or(""), reader.path() + " (config)");
}

}  // namespace meridian::ckpt
