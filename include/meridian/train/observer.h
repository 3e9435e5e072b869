// What attaches to the training loop: an Observer is called at the loop's fixed points, and asks the
// loop for a stop, an evaluation or a save through a LoopControl record; it never touches the loop's
// body (HF's TrainerCallback, Lightning's Callback).
//
// One step of Trainer::run(), on every rank:
//
//   on_step_begin(step)                       before the step (steps done so far)
//     on_batch(micro)                         after each micro-batch is read, before its forward
//   on_step_end(event, result, control)       the step applied (or skipped): its loss, norm and times
//   [evaluation: on the schedule, at the last step, or when an observer asked for one]
//   on_evaluate(event, metrics, control)      after the evaluation
//   on_save(event)                            the step's last point: where checkpoints are written
//   on_log(metrics)                           when the step's line is logged: observers add values
//
// and once per run: on_run_begin(step, control) before the first step, on_run_end(summary) after the last.
//
// Contract:
//  * Every rank calls every observer at the same points of the same steps, in the order the observers
//    were added, with the same event: so on_run_begin, on_step_end, on_evaluate, on_save and on_run_end
//    may run collectives (over the Runtime's communicators); on_step_begin, on_batch and on_log must not
//    (on_log runs on rank 0's logging steps only).
//  * An observer sets `control` only from values every rank agrees on (results of a collective, the
//    step count, the config): the loop acts on each rank's record without comparing them.
//  * Any point may throw; the exception leaves Trainer::run() on that rank. Throw on every rank alike
//    (a TrainingError from agreed values) or the other ranks end in the watchdog's abort.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace meridian::train {

using Metrics = std::vector<std::pair<std::string, double>>;
struct StepTimes;
struct TrainSummary;

// Where the loop is after an optimizer step (every rank agrees on every field).
struct StepEvent {
  int64_t steps_done = 0;
  bool last = false;       // the last step of the run (train.steps, or an observer's stop)
  bool stopping = false;   // the run ends here early (train.stop_at, or SIGTERM/SIGUSR1 on some rank before
                           // the last step): run() returns after the observers
  bool best = false;       // this step's evaluation is the best so far (LoopControl::best): keep its weights
  bool evaluated = false;  // an evaluation ran after this step (its metrics.csv rows are written)
  bool save = false;       // an observer asked for a checkpoint of this step (LoopControl::save)
};

// What a step measured: the mean loss over ranks (NaN: skipped by the NaN guard), the global gradient
// norm before clipping, and this rank's times.
struct StepResult {
  double loss = 0, grad_norm = 0;
  const StepTimes& times;
};

// What observers ask of the loop. Requests add up over the observers of one point; the loop reads them
// after all of them ran.
struct LoopControl {
  bool stop = false;      // end the run after this step as its last (evaluation, at_end checkpoint, summary)
  std::string why;        // the stop's reason, logged and kept in TrainSummary::early_stop
  bool evaluate = false;  // on_step_end: evaluate after this step
  bool save = false;      // save a checkpoint of this step (StepEvent::save)
  bool best = false;      // on_evaluate: the evaluation is the best so far (StepEvent::best)
  void request_stop(std::string reason) {
    if (!stop) why = std::move(reason);
    stop = true;
  }
};

class Observer {
 public:
  virtual ~Observer() = default;
  // Collective. Before the first step of run(); `step`: the steps already done (a resumed run's). A stop
  // asked here ends the run before any step ("nothing to do").
  virtual void on_run_begin(int64_t /*step*/, LoopControl& /*control*/) {}
  // Not collective. Before each step; `step`: the steps done so far.
  virtual void on_step_begin(int64_t /*step*/) {}
  // Not collective. After micro-batch `micro` of the step is read (Task::next_batch), before its forward.
  virtual void on_batch(int64_t /*micro*/) {}
  // Collective. After each optimizer step (applied or skipped), before its evaluation.
  virtual void on_step_end(const StepEvent& /*event*/, const StepResult& /*result*/, LoopControl& /*control*/) {}
  // Collective. After each evaluation during the steps (eval_at_start's is not one); `metrics` agree.
  virtual void on_evaluate(const StepEvent& /*event*/, const Metrics& /*metrics*/, LoopControl& /*control*/) {}
  // Collective. The step's last point, after its evaluation: checkpoints are written here.
  virtual void on_save(const StepEvent& /*event*/) {}
  // Not collective; rank 0 only, on the steps it logs: the observer's values for the step's row.
  virtual void on_log(Metrics& /*metrics*/) {}
  // Collective. Once, after the last step (also after a stop or a "nothing to do"): the observer's
  // figures into the summary (summary.stopped tells a run cut short).
  virtual void on_run_end(TrainSummary& /*summary*/) {}
};

}  // namespace meridian::train
