// The loop's own observers that decide without collectives, alone: best/patience (BestJudge) and the
// balancer's stretches at one set of shares (Stretches). The loop's order of calls and its response to
// requests are tested through a Trainer in trainer_mpi_test.cpp (ObserversSeeTheFixedPointsInOrder...).
#include <gtest/gtest.h>

#include <cmath>

#include "balance_watch.h"
#include "best.h"

namespace train = meridian::train;

namespace {

// One evaluation at `step` reporting `metrics` to `judge`; returns the requests it made.
train::LoopControl evaluate(train::BestJudge& judge, int64_t step, const train::Metrics& metrics) {
  train::LoopControl control;
  train::StepEvent event;
  event.steps_done = step;
  event.evaluated = true;
  judge.on_evaluate(event, metrics, control);
  return control;
}

}  // namespace

TEST(BestJudge, MarksTheBestAndCountsEvaluationsSinceIt) {
  train::BestJudge judge(1, {"loss", /*maximize=*/false}, /*patience=*/0);
  EXPECT_TRUE(evaluate(judge, 10, {{"acc", 0.1}, {"loss", 2.0}}).best);  // the first is the best so far
  EXPECT_FALSE(evaluate(judge, 20, {{"loss", 2.5}}).best);
  EXPECT_TRUE(evaluate(judge, 30, {{"loss", 1.5}}).best);
  EXPECT_FALSE(evaluate(judge, 40, {{"loss", 1.5}}).best);  // equal is not better
  EXPECT_EQ(judge.record().value, 1.5);
  EXPECT_EQ(judge.record().step, 30);
  EXPECT_EQ(judge.record().evals_since, 1);
  train::BestJudge larger(1, {"acc", /*maximize=*/true}, 0);
  EXPECT_TRUE(evaluate(larger, 1, {{"acc", 0.5}}).best);
  EXPECT_TRUE(evaluate(larger, 2, {{"acc", 0.6}}).best);
  EXPECT_FALSE(evaluate(larger, 3, {{"acc", 0.55}}).best);
}

TEST(BestJudge, PatienceAsksForTheStopAndAResumedRunDoesNothing) {
  train::BestJudge judge(1, {"loss", false}, /*patience=*/2);
  EXPECT_FALSE(evaluate(judge, 5, {{"loss", 1.0}}).stop);
  EXPECT_FALSE(evaluate(judge, 10, {{"loss", 1.1}}).stop);
  const auto control = evaluate(judge, 15, {{"loss", 1.2}});
  EXPECT_TRUE(control.stop);
  EXPECT_EQ(control.why,
            "stopped at step 15: 2 evaluations without a better loss (train.patience 2; the best, 1.0000, at step 5)");
  // A run resumed from that checkpoint's record stops before its first step.
  train::BestJudge resumed(1, {"loss", false}, 2);
  resumed.set_record(judge.record());
  train::LoopControl begin;
  resumed.on_run_begin(15, begin);
  EXPECT_TRUE(begin.stop);
  // Without patience nothing stops.
  train::BestJudge patient(1, {"loss", false}, 0);
  for (int k = 1; k <= 5; ++k) EXPECT_FALSE(evaluate(patient, k, {{"loss", double(k)}}).stop);
}

TEST(BestJudge, AnEvaluationWithoutTheMetricNamesWhatItReported) {
  train::BestJudge judge(1, {"map50", true}, 0);
  try {
    evaluate(judge, 7, {{"loss", 1.0}, {"acc", 0.5}});
    FAIL() << "no error";
  } catch (const train::TrainingError& e) {
    EXPECT_EQ(std::string(e.what()),
              "checkpoint.best: the evaluation at step 7 reported no map50 (it reported: loss, acc); name one of these "
              "or give data.eval a dataset that has it");
  }
  train::BestJudge none(1, {"", true}, 0);  // no checkpoint.best: nothing judged
  EXPECT_FALSE(evaluate(none, 1, {}).best);
  EXPECT_TRUE(std::isnan(none.record().value));
}

TEST(Stretches, TheLongestLeavesOutTheWarmUpAndEachStepAfterAChange) {
  train::Stretches s;
  // Steps 1..10: step 1 is the warm-up (not measured); the shares change after steps 4 and 9.
  for (int64_t step = 1; step <= 10; ++step) s.add(step, double(step), step > 1, step == 4 || step == 9);
  // Stretches: [2, 4], [6, 9] (5 is the first after a change), and none after 10's change (step 10
  // is the first after the change at 9).
  const auto longest = s.longest();
  EXPECT_EQ(longest.first, 6);
  EXPECT_EQ(longest.last, 9);
  EXPECT_EQ(longest.steps(), 4);
  EXPECT_EQ(longest.seconds, 6.0 + 7 + 8 + 9);
  train::Stretches empty;
  EXPECT_EQ(empty.longest().steps(), 0);
}
