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
// first step of the run and the step after a change are left out: warm-up, a restarted loader).
// At the end of a window the ranks exchange their times (collective) and, with the same arithmetic
// on the same numbers, agree on new shares proportional to speed: integers within [1,
// train.balance_max] summing to G (balance_shares()), adopted only when the predicted step time
// (the largest share x time per sample) falls by more than train.balance_threshold of the current
// one, so the shares do not oscillate.
//
// The shares in force, and this rank's window, are part of a checkpoint (BalanceState); a run
// resumed on another world size starts from even shares and measures again.
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

// What a checkpoint keeps of the balancer: the shares in force (the same on every rank) and this
// rank's measuring window.
struct BalanceState {
  std::vector<int64_t> shares;  // one per rank
  double busy_s = 0;            // this rank's busy seconds in the window so far
  double samples = 0;           // and its samples
};

class Balancer {
 public:
  // Not collective. Starts from train.balance_shares, else even; ConfigError naming the key when
  // they do not fit (one per rank, each within [1, max], summing to the global micro-batch), or
  // when train.balance_max is below train.batch.
  Balancer(int rank, int ranks, int64_t batch, const TrainerSettings& settings, const Config& config);

  const std::vector<int64_t>& shares() const { return state_.shares; }
  bool even() const;
  int64_t global_micro_batch() const { return batch_ * ranks_; }
  int64_t max_share() const { return max_share_; }  // train.balance_max, at most what the others leave

  // Not collective: this rank's busy seconds and samples in the step just done.
  void record(double busy_s, int64_t samples);
  // Collective (on `control`, every rank after step `step`): at the end of a window with
  // train.balance auto, the ranks agree on new shares. True when they changed (the caller hands
  // them to the task).
  bool rebalance(comm::Communicator& control, int64_t step);

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
  int64_t batch_, max_share_, every_;
  double threshold_;
  bool automatic_;
  BalanceState state_;
  bool skip_next_ = true;      // the next step is not measured (warm-up, a restarted loader)
  std::vector<double> speed_;  // the last window's time per sample of every rank (empty before one)
};

}  // namespace meridian::train
