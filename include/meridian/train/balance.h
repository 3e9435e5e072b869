// Uneven batch shares from measured speed (train.balance): a slow rank takes fewer samples of each
// global micro-batch, so the others stop waiting for it.
//
// The global micro-batch G (train.batch x ranks) is split into shares, one per rank, summing to G
// (data::DistributedSampler::set_shares; the same samples form each global batch). Each task
// normalises its loss by global counts (train::Task::forward), so any split gives the update of the
// even one, to rounding.
//
// Every rank measures its busy time per sample: the step's time minus the optimizer and minus what
// it waited in collectives (comm::blocked_seconds), over a window of train.balance_every steps (the
// first window of a run ends after 2 measured steps; the first step of the run and the step after a
// change are left out: warm-up, the batches read again); a window's time is the median of its steps'
// (a window that holds a change of speed takes the side most of its steps were on). At the end of
// a window the ranks exchange their times (collective) and, with the same arithmetic on the same
// numbers, keep the last 3 windows' times. decide_shares() turns them into a decision: the estimate is each rank's
// median over those windows (one noisy window moves nothing; a real change of speed wins the median in its second whole
// window), the proposal is shares proportional to speed (balance_shares()), and it is adopted only when the step time
// it predicts falls by more than train.balance_threshold plus the estimates' own scatter, and by more over the coming
// windows than a change costs (measured: the step after the last change against the steps after it).
//
// The shares in force, the windows kept, the cost and this rank's window are part of a checkpoint
// (BalanceState); a run resumed on another world size starts from even shares and measures again.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meridian/core/config_schema.h"
#include "meridian/train/settings.h"
#include "meridian/train/task.h"

namespace meridian::comm {
class Communicator;
}

namespace meridian::train {

// Pure: the shares of `total` samples for ranks taking `seconds[r]` per sample (> 0 each): the
// largest-remainder rounding of total x speed / sum of speeds, each within [1, max_share] (ranks
// at a bound are fixed there and the rest shared again). Needs ranks <= total <= ranks x max_share.
std::vector<int64_t> balance_shares(const std::vector<double>& seconds, int64_t total, int64_t max_share);

// Pure: the step time `shares` predict: the largest shares[r] x seconds[r].
double predicted_step(const std::vector<int64_t>& shares, const std::vector<double>& seconds);

// Pure: shares written as text ("6,2"), parsed; std::invalid_argument when not integers.
std::vector<int64_t> parse_shares(const std::string& text);

// Pure: windows of seconds per sample as a checkpoint keeps them ("a,b;c,d", each number to 17
// digits: exact), and back; parse_windows throws std::invalid_argument on an item that is not a
// number > 0. parse_number: the whole of `text` as a number, else std::invalid_argument.
std::string format_windows(const std::vector<std::vector<double>>& windows);
std::vector<std::vector<double>> parse_windows(const std::string& text);
double parse_number(const std::string& text);

// What decide_shares() makes of the windows.
struct BalanceDecision {
  std::vector<double> estimate;  // every rank's seconds per sample
  std::vector<int64_t> shares;   // proposed (balance_shares of the estimate)
  bool change = false;           // adopt them
  double now_s = 0, then_s = 0;  // the step time the current and the proposed shares predict
  double scatter = 0;            // the largest rank's median absolute deviation over its windows, relative
  std::string why;               // the rule that decided, for the log
};

// Pure: the decision from `windows` (each: every rank's seconds per sample, > 0; the newest last; at
// most 3 are used): the estimate is each rank's median (mean of 2); the proposal is adopted when it
// differs from `current` and now - then > now x (threshold + scatter) and (now - then) x
// `steps_ahead` > `cost_s` (a change's measured cost; < 0: not measured yet, one step of `now`).
BalanceDecision decide_shares(const std::vector<int64_t>& current, const std::vector<std::vector<double>>& windows,
                              int64_t max_share, double threshold, double cost_s, int64_t steps_ahead);

// What a checkpoint keeps of the balancer: what every rank has alike (the shares in force, the last
// windows, a change's cost) and this rank's measuring window.
struct BalanceState {
  std::vector<int64_t> shares;               // one per rank
  std::vector<std::vector<double>> windows;  // the last windows' seconds per sample of every rank, oldest first
  double cost_s = -1;                        // a share change's measured cost (seconds); < 0: not measured yet
  int64_t changes = 0;                       // share changes so far in the run
  std::vector<double> per_sample;            // this rank's window so far: each measured step's busy s per sample
  double step_s = 0;                         // and those steps' whole time
};

class Balancer {
 public:
  // Not collective. Starts from train.balance_shares, else even; ConfigError naming the key when
  // they do not fit (one per rank, each within [1, max], summing to the global micro-batch), or
  // when train.balance_max is below train.batch.
  Balancer(int rank, int ranks, int64_t batch, const TrainerSettings& settings, const Config& config);

  const std::vector<int64_t>& shares() const { return state_.shares; }
  bool even() const;
  // Whether the shares are worth showing (logs, health, metrics): train.balance auto, or shares given.
  bool shown() const { return automatic_ || !even(); }
  int64_t global_micro_batch() const { return batch_ * ranks_; }
  int64_t max_share() const { return max_share_; }  // train.balance_max, at most what the others leave

  // Not collective: this rank's busy seconds, whole step seconds and samples in the step just done.
  void record(double busy_s, double step_s, int64_t samples);
  // Collective (on `control`, every rank after step `step`): at the end of a window with
  // train.balance auto, the ranks agree on new shares. True when they changed (the caller hands
  // them to the task); `why` then says why (the predicted step times, the rule).
  bool rebalance(comm::Communicator& control, int64_t step, std::string* why = nullptr);
  int64_t changes() const { return state_.changes; }  // share changes so far in the run

  // The shares as rank 0 logs them: "rank 1: 33 % of the batch (0.51 x median speed), ...".
  std::string describe() const;
  // share_r: each rank's fraction of the batch, for the step metrics.
  Metrics metrics() const;

  BalanceState state() const { return state_; }
  // On resume: the checkpoint's state. False when its shares are dropped for even ones (another
  // world size or batch).
  bool set_state(const BalanceState& state);

 private:
  int rank_, ranks_;
  int64_t batch_, max_share_, every_, steps_;
  double threshold_;
  bool automatic_;
  BalanceState state_;
  // The next step is not measured (the run's first: warm-up; after a change: the batches read
  // again, its whole time is the change's cost, `after_change_s`).
  enum class Skip { None, WarmUp, Change } skip_ = Skip::WarmUp;
  double after_change_s_ = -1;  // the step after the last change's whole time, until the window ends
  std::vector<double> speed_;   // the last decision's estimate, seconds per sample (empty before one)
};

}  // namespace meridian::train
