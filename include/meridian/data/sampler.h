// Distributed sampler: which dataset rows each rank reads, epoch after epoch.
//
// Epoch e visits a permutation of [0, N) derived only from (seed, epoch): identical on every rank,
// no table in memory (a keyed Feistel bijection with cycle walking, so 10M-row datasets cost
// nothing). Positions are counted in *global* samples: global position g of the epoch goes to rank
// g mod world_size. A global batch of world_size x B samples starts at position p = step x
// world_size x B; rank r takes positions p + r, p + r + world_size, ... So (epoch, position) is the
// whole state to checkpoint, and a run resumed on another world size continues from the same global
// position without losing or repeating a sample.
//
// Shares (train.balance): a global batch may be split unevenly, rank r taking shares[r] samples
// (the shares sum to the global batch). Uneven shares are contiguous: rank r takes positions
// [p + s_r, p + s_r + shares[r]) where s_r is the sum of the shares before it. Even shares keep the
// interleaved split above. Either way the same samples form each global batch, so the data order
// over the job does not depend on the shares.
//
// drop_last = true: an epoch has floor(N / global_batch) global batches; the tail is not visited
// that epoch. drop_last = false: the last global batch is completed by wrapping around to the start
// of the permutation (those samples appear twice in that epoch). Pure, thread-safe, not collective.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace meridian::data {

class DistributedSampler {
 public:
  // Throws std::invalid_argument on n < 1, world_size < 1, rank outside [0, world_size), batch < 1.
  DistributedSampler(int64_t n, int64_t per_rank_batch, int rank, int world_size, uint64_t seed, bool drop_last);

  int64_t global_batch() const { return per_rank_batch_ * world_size_; }
  // Not thread-safe (a loader calls it on its I/O thread, between two reads): from now on rank r's
  // part of each global batch is shares[r] samples (empty: even). Throws what check_shares throws.
  void set_shares(std::vector<int64_t> shares);
  // Thread-safe: std::invalid_argument unless `shares` is empty or has one share per rank, each at
  // least 1, summing to global_batch().
  void check_shares(const std::vector<int64_t>& shares) const;
  // This rank's samples per global batch, and the largest share of any rank.
  int64_t share() const;
  int64_t max_share() const;
  int64_t steps_per_epoch() const;  // global batches per epoch (0 if N < global batch with drop_last)
  int64_t epoch_samples() const { return steps_per_epoch() * global_batch(); }
  // For the loaders: the sampler over the `n` `what` (e.g. "samples") of the dataset `path`, or a
  // UserError in the config's words: "<path>: it has no <what>" when n < 1, and when an epoch has no
  // global batch "<path>: <N> <what> are fewer than one global batch (<G> = train.batch <B> per rank
  // x <R> ranks); lower train.batch<also>".
  static std::unique_ptr<DistributedSampler> for_loader(const std::string& path, int64_t n, const std::string& what,
                                                        int64_t per_rank_batch, int rank, int world_size, uint64_t seed,
                                                        bool drop_last, const std::string& also = "");

  // Dataset row at global position `position` of `epoch` (position < epoch_samples()).
  int64_t row(int64_t epoch, int64_t position) const;
  // This rank's rows of the global batch starting at global position `start` (in position order).
  std::vector<int64_t> batch(int64_t epoch, int64_t start) const;

 private:
  int64_t n_, per_rank_batch_;
  int rank_, world_size_;
  uint64_t seed_;
  bool drop_last_;
  std::vector<int64_t> shares_;  // empty: even
  int64_t offset_ = 0;           // uneven: the shares before this rank's
};

// The keyed permutation on its own: a bijection of [0, n) for each key.
int64_t permute(int64_t index, int64_t n, uint64_t key);

}  // namespace meridian::data
