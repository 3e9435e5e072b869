// checkpoint.best and train.patience as an observer of the loop (private to train; best.cpp): after
// each evaluation it judges the metric against the best so far, marks the step as the best
// (LoopControl::best, so that the checkpointer keeps its weights) and asks for the stop when
// train.patience evaluations in a row brought nothing better.
#pragma once

#include "meridian/train/observer.h"
#include "meridian/train/trainer.h"

namespace meridian::train {

class BestJudge : public Observer {
 public:
  // `best.metric` empty: no judging (and train.patience has nothing to count).
  BestJudge(int rank, BestMetric best, int64_t patience) : rank_(rank), best_(std::move(best)), patience_(patience) {}

  const BestRecord& record() const { return record_; }
  void set_record(const BestRecord& record) { record_ = record; }  // on resume, before run()

  // A run resumed from its patience stop does nothing.
  void on_run_begin(int64_t step, LoopControl& control) override;
  // TrainingError (every rank: the metrics agree) when the evaluation lacks the metric.
  void on_evaluate(const StepEvent& event, const Metrics& metrics, LoopControl& control) override;
  void on_run_end(TrainSummary& summary) override;

 private:
  // Why train.patience ends the run after step `step` ("": it does not).
  std::string patience_exhausted(int64_t step) const;

  int rank_;
  BestMetric best_;
  int64_t patience_;
  BestRecord record_;
};

}  // namespace meridian::train
