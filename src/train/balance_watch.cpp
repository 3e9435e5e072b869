#include "balance_watch.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "meridian/comm/communicator.h"
#include "meridian/train/trainer.h"

namespace meridian::train {

void Task::set_shares(const std::vector<int64_t>& shares) {
  if (!shares.empty())
    throw std::logic_error("task " + name() + " cannot split its batches unevenly (train.balance needs it)");
}

void Stretches::add(int64_t step, double seconds, bool measured, bool changed) {
  if (measured && !after_change_) {
    if (now_.steps() <= 0) now_.first = step;
    now_.last = step, now_.seconds += seconds;
  }
  after_change_ = changed;
  if (changed) close();
}

Stretches::Stretch Stretches::longest() {
  close();
  return longest_;
}

void Stretches::close() {
  if (now_.steps() > longest_.steps()) longest_ = now_;
  now_ = {};
}

BalanceWatch::BalanceWatch(int rank, comm::Communicator& control, Task& task, Balancer& balancer,
                           const TrainerSettings& settings, int64_t global_batch)
    : rank_(rank), control_(control), task_(task), balancer_(balancer), s_(settings), global_batch_(global_batch) {}

void BalanceWatch::on_run_begin(int64_t step, LoopControl&) {
  first_ = step;
  if (!balancer_.even()) apply_shares("from the start");
}

void BalanceWatch::on_step_end(const StepEvent& event, const StepResult& result, LoopControl&) {
  const StepTimes& t = result.times;
  // Busy: what this rank's share cost it, without the optimizer (the same for every share) and
  // without waiting for the others.
  balancer_.record(t.total - t.optimizer - t.waited, t.total, balancer_.shares()[size_t(rank_)] * s_.accumulate);
  const int64_t step = event.steps_done;
  std::string why;
  const bool changed = balancer_.rebalance(control_, step, &why);
  if (changed) apply_shares(fmt::format("at step {}", step), why);
  settled_.add(step, t.total, step > first_ + 1, changed);
  stepped_ = true;
}

void BalanceWatch::on_log(Metrics& metrics) {
  if (!balancer_.shown()) return;
  for (auto& kv : balancer_.metrics()) metrics.push_back(std::move(kv));
}

void BalanceWatch::on_run_end(TrainSummary& summary) {
  if (!s_.balance || summary.stopped || !stepped_) return;
  const Stretches::Stretch longest = settled_.longest();
  at::Tensor seconds = at::tensor({longest.seconds}, at::kDouble);
  control_.allreduce(seconds, comm::ReduceOp::Max);
  summary.share_changes = balancer_.changes();
  summary.settled_first = longest.first, summary.settled_last = longest.last;
  const double slowest = seconds.item<double>();
  if (slowest > 0) summary.settled_samples_per_s = double(global_batch_ * longest.steps()) / slowest;
}

void BalanceWatch::apply_shares(const std::string& when, const std::string& why) {
  task_.set_shares(balancer_.even() ? std::vector<int64_t>{} : balancer_.shares());
  if (rank_ == 0) spdlog::info("batch shares {}: {}{}", when, balancer_.describe(), why.empty() ? "" : "; " + why);
}

}  // namespace meridian::train
