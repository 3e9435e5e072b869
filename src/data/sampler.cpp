#include "meridian/data/sampler.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "meridian/core/error.h"
#include "meridian/core/hash.h"

namespace meridian::data {

int64_t permute(int64_t index, int64_t n, uint64_t key) {
  if (n <= 1) return 0;
  // Balanced Feistel network on the smallest even number of bits covering n; values >= n are
  // walked again (cycle walking), which keeps it a bijection of [0, n).
  int bits = 2;
  while ((uint64_t(1) << bits) < uint64_t(n)) bits += 2;
  const int half = bits / 2;
  const uint64_t mask = (uint64_t(1) << half) - 1;
  uint64_t x = uint64_t(index);
  do {
    uint64_t left = x >> half, right = x & mask;
    for (int round = 0; round < 4; ++round) {
      const uint64_t f = splitmix64(right ^ splitmix64(key + uint64_t(round))) & mask;
      const uint64_t next = left ^ f;
      left = right;
      right = next;
    }
    x = (left << half) | right;
  } while (x >= uint64_t(n));
  return int64_t(x);
}

DistributedSampler::DistributedSampler(int64_t n, int64_t per_rank_batch, int rank, int world_size, uint64_t seed,
                                       bool drop_last)
    : n_(n), per_rank_batch_(per_rank_batch), rank_(rank), world_size_(world_size), seed_(seed), drop_last_(drop_last) {
  if (n < 1) throw std::invalid_argument("sampler: empty dataset");
  if (world_size < 1 || rank < 0 || rank >= world_size)
    throw std::invalid_argument("sampler: rank " + std::to_string(rank) + " of " + std::to_string(world_size));
  if (per_rank_batch < 1) throw std::invalid_argument("sampler: batch size must be at least 1");
}

int64_t DistributedSampler::steps_per_epoch() const {
  const int64_t g = global_batch();
  return drop_last_ ? n_ / g : (n_ + g - 1) / g;
}

std::unique_ptr<DistributedSampler> DistributedSampler::for_loader(const std::string& path, int64_t n,
                                                                   const std::string& what, int64_t per_rank_batch,
                                                                   int rank, int world_size, uint64_t seed,
                                                                   bool drop_last, const std::string& also) {
  if (n < 1) throw UserError(path + ": it has no " + what);
  auto s = std::make_unique<DistributedSampler>(n, per_rank_batch, rank, world_size, seed, drop_last);
  if (s->steps_per_epoch() > 0) return s;
  throw UserError(path + ": " + std::to_string(n) + " " + what + " are fewer than one global batch (" +
                  std::to_string(s->global_batch()) + " = train.batch " + std::to_string(per_rank_batch) +
                  " per rank x " + std::to_string(world_size) + (world_size == 1 ? " rank" : " ranks") +
                  "); lower train.batch" + also);
}

int64_t DistributedSampler::row(int64_t epoch, int64_t position) const {
  const uint64_t key = splitmix64(seed_ ^ splitmix64(uint64_t(epoch) + 0x51a7e5ull));
  return permute(position % n_, n_, key);  // positions past N (padding) wrap to the start
}

void DistributedSampler::check_shares(const std::vector<int64_t>& shares) const {
  if (shares.empty()) return;
  if (int64_t(shares.size()) != world_size_)
    throw std::invalid_argument("sampler: " + std::to_string(shares.size()) + " shares for " +
                                std::to_string(world_size_) + " ranks");
  int64_t sum = 0;
  for (int64_t s : shares) {
    if (s < 1) throw std::invalid_argument("sampler: a share below 1 sample");
    sum += s;
  }
  if (sum != global_batch())
    throw std::invalid_argument("sampler: shares sum to " + std::to_string(sum) + ", not the global batch " +
                                std::to_string(global_batch()));
}

void DistributedSampler::set_shares(std::vector<int64_t> shares) {
  check_shares(shares);
  if (std::all_of(shares.begin(), shares.end(), [&](int64_t s) { return s == per_rank_batch_; })) shares.clear();
  shares_ = std::move(shares);
  offset_ = 0;
  for (int r = 0; r < rank_ && !shares_.empty(); ++r) offset_ += shares_[size_t(r)];
}

int64_t DistributedSampler::share() const { return shares_.empty() ? per_rank_batch_ : shares_[size_t(rank_)]; }

int64_t DistributedSampler::max_share() const {
  return shares_.empty() ? per_rank_batch_ : *std::max_element(shares_.begin(), shares_.end());
}

std::vector<int64_t> DistributedSampler::batch(int64_t epoch, int64_t start) const {
  std::vector<int64_t> rows;
  rows.reserve(size_t(share()));
  if (shares_.empty()) {
    for (int64_t j = 0; j < per_rank_batch_; ++j) rows.push_back(row(epoch, start + rank_ + j * world_size_));
  } else {
    for (int64_t j = 0; j < share(); ++j) rows.push_back(row(epoch, start + offset_ + j));
  }
  return rows;
}

}  // namespace meridian::data
