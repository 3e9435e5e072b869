#include "best.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

namespace meridian::train {

void BestJudge::on_run_begin(int64_t step, LoopControl& control) {
  if (const std::string why = patience_exhausted(step); !why.empty()) control.request_stop(why);
}

void BestJudge::on_evaluate(const StepEvent& event, const Metrics& m, LoopControl& control) {
  if (best_.metric.empty()) return;
  const int64_t step = event.steps_done;
  const auto it = std::find_if(m.begin(), m.end(), [&](const auto& kv) { return kv.first == best_.metric; });
  if (it == m.end()) {
    std::string reported;
    for (const auto& kv : m) reported += (reported.empty() ? "" : ", ") + kv.first;
    throw TrainingError("checkpoint.best: the evaluation at step " + std::to_string(step) + " reported no " +
                        best_.metric + " (it reported: " + (reported.empty() ? "nothing" : reported) +
                        "); name one of these or give data.eval a dataset that has it");
  }
  const double v = it->second;
  const bool better = std::isnan(record_.value) || (best_.maximize ? v > record_.value : v < record_.value);
  if (better) {
    record_ = {v, step, 0};
  } else {
    ++record_.evals_since;
  }
  if (rank_ == 0)
    spdlog::info("checkpoint.best {}: {:.4f} at step {}{}", best_.metric, v, step,
                 better ? " (the best so far)"
                        : fmt::format("; the best is {:.4f} at step {} ({} evaluation(s) since)", record_.value,
                                      record_.step, record_.evals_since));
  control.best = control.best || better;
  if (const std::string why = patience_exhausted(step); !why.empty()) control.request_stop(why);
}

void BestJudge::on_run_end(TrainSummary& summary) { summary.best = record_; }

std::string BestJudge::patience_exhausted(int64_t step) const {
  if (patience_ <= 0 || record_.evals_since < patience_) return "";
  return fmt::format(
      "stopped at step {}: {} evaluations without a better {} (train.patience {}; the best, {:.4f}, "
      "at step {})",
      step, record_.evals_since, best_.metric, patience_, record_.value, record_.step);
}

}  // namespace meridian::train
