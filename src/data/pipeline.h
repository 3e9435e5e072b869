// Private to data/: the pipeline under every loader. An I/O thread walks the sampler's order from
// a start (epoch, position), epoch after epoch without end, and reads each batch; `finish` turns
// what was read into the batch the consumer gets, on the I/O thread itself or, with
// `finish_thread`, on a second thread that works while the next batch is read (then `prefetch`
// read batches may wait between the two threads as well). `prefetch` finished batches wait in a
// bounded channel; next() takes them in order.
//
// redirect() moves the walk to another start, with a change (the sampler's shares) made on the I/O
// thread between two reads: the batches read ahead are dropped, the threads and channels stay. Each
// item carries the generation of the walk that read it, and a stale one is dropped wherever it is
// (unfinished on the finish thread, untaken by next()).
//
// Errors: an exception from read or finish ends the pipeline; next() returns the batches before it,
// then rethrows it. Destruction closes the channels and joins the threads: a thread inside read or
// finish completes that call, then exits, whatever the consumer left untaken.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "channel.h"
#include "meridian/core/error.h"
#include "meridian/data/sampler.h"

namespace meridian::data {

// Where a batch lies in the sampler's order.
struct BatchIndex {
  int64_t epoch = 0;
  int64_t position = 0;       // global samples of `epoch` before this batch
  int64_t step = 0;           // global batch index within the epoch
  int64_t next_position = 0;  // global position after this batch
};

// Batch: what next() returns, with members epoch, step, next_position and wait_s, which the
// pipeline sets. Raw: what read returns (the batch itself when there is nothing to finish).
template <typename Batch, typename Raw = Batch>
class Pipeline {
 public:
  using Read = std::function<Raw(const BatchIndex&)>;             // on the I/O thread
  using Finish = std::function<Batch(Raw&&, const BatchIndex&)>;  // on the finish thread, else the I/O thread

  // Starts the threads. `name` names the loader in the error when next() is called after stop.
  // Without `finish` (Raw = Batch only) the read batch is the batch.
  Pipeline(std::string name, const DistributedSampler& sampler, int64_t epoch, int64_t position, size_t prefetch,
           Read read, Finish finish = {}, bool finish_thread = false)
      : name_(std::move(name)),
        epoch_samples_(sampler.epoch_samples()),
        global_batch_(sampler.global_batch()),
        read_(std::move(read)),
        finish_(std::move(finish)),
        threaded_(finish_thread),
        raw_(prefetch),
        ready_(prefetch) {
    if constexpr (std::is_same_v<Raw, Batch>)
      if (!finish_) finish_ = [](Raw&& raw, const BatchIndex&) { return std::move(raw); };
    start(epoch, position);
  }
  ~Pipeline() { stop(); }
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // Consumer thread: the next batch, with the time it waited in batch.wait_s; a worker's exception
  // once the batches before it are taken.
  Batch next() {
    const auto t0 = std::chrono::steady_clock::now();
    Ready r;
    do {
      if (!ready_.pop(r)) {
        if (error_) std::rethrow_exception(error_);  // stored before the close, which the channel's mutex orders
        MERIDIAN_CHECK(false, name_ + " stopped");
      }
    } while (r.generation != wanted_.load(std::memory_order_relaxed));  // read before a redirect: dropped
    r.batch.wait_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return std::move(r.batch);
  }

  // Consumer thread: the next batch is the one at (epoch, position), read after `change` ran on the
  // I/O thread (between two of its reads, so read never sees a change half made; e.g. the sampler's
  // new shares). What was read ahead is dropped; the threads go on. Two redirects before the I/O
  // thread takes the first run both changes, in order, and start at the second's position.
  void redirect(int64_t epoch, int64_t position, std::function<void()> change) {
    {
      std::lock_guard<std::mutex> lock(redirect_mu_);
      changes_.push_back(std::move(change));
      start_ = {epoch, position};
      wanted_.fetch_add(1, std::memory_order_relaxed);
    }
    // Room for the I/O and finish threads, which may wait to push a stale batch.
    ready_.clear();
    raw_.clear();
  }

  // Closes the channels and joins the threads (idempotent); the loader calls it before anything
  // that read or finish use goes away.
  void stop() {
    raw_.close();
    ready_.close();
    if (io_thread_.joinable()) io_thread_.join();
    if (finish_thread_.joinable()) finish_thread_.join();
  }

 private:
  struct Item {
    BatchIndex at;
    Raw raw;
    std::exception_ptr error;  // read failed: the pipeline ends here
    uint64_t generation = 0;   // of the walk that read it
  };
  struct Ready {
    Batch batch;
    uint64_t generation = 0;
  };

  // I/O thread: a redirect not yet taken moves `at` and `generation` (its changes run here).
  void take_redirect(BatchIndex& at, uint64_t& generation) {
    if (wanted_.load(std::memory_order_relaxed) == generation) return;
    std::vector<std::function<void()>> changes;
    {
      std::lock_guard<std::mutex> lock(redirect_mu_);
      changes.swap(changes_);
      generation = wanted_.load(std::memory_order_relaxed);
      at = start_;
    }
    for (auto& change : changes) change();
  }
  bool stale(uint64_t generation) const { return generation != wanted_.load(std::memory_order_relaxed); }

  void start(int64_t epoch, int64_t position) {
    io_thread_ = std::thread([this, epoch, position] { io_loop(epoch, position); });
    if (!threaded_) return;
    try {
      finish_thread_ = std::thread([this] { finish_loop(); });
    } catch (...) {
      stop();
      throw;
    }
  }

  void io_loop(int64_t epoch, int64_t position) {
    BatchIndex at{epoch, position};
    uint64_t generation = 0;
    for (;;) {
      try {
        take_redirect(at, generation);
      } catch (...) {
        fail(std::current_exception());
        return;
      }
      if (at.position >= epoch_samples_) ++at.epoch, at.position = 0;
      at.step = at.position / global_batch_;
      at.next_position = at.position + global_batch_;
      Item item;
      item.at = at;
      item.generation = generation;
      try {
        item.raw = read_(at);
      } catch (...) {
        item.error = std::current_exception();
      }
      if (!item.error && stale(item.generation)) continue;  // redirected while reading: the loop's top moves `at`
      if (threaded_) {
        const bool failed = bool(item.error);
        if (!raw_.push(std::move(item)) || failed) return;
      } else if (!deliver(std::move(item))) {
        return;
      }
      at.position = at.next_position;
    }
  }

  void finish_loop() {
    Item item;
    while (raw_.pop(item))
      if (!deliver(std::move(item))) return;
  }

  // Finishes one item and hands it to the consumer; false when the pipeline ends (stopped or failed).
  // A stale item is dropped unfinished (true: the pipeline goes on); a read error is not (the I/O
  // thread has ended).
  bool deliver(Item item) {
    if (item.error) return fail(item.error);
    if (stale(item.generation)) return true;
    Ready r;
    r.generation = item.generation;
    try {
      r.batch = finish_(std::move(item.raw), item.at);
    } catch (...) {
      return fail(std::current_exception());
    }
    r.batch.epoch = item.at.epoch;
    r.batch.step = item.at.step;
    r.batch.next_position = item.at.next_position;
    return ready_.push(std::move(r));
  }

  bool fail(std::exception_ptr e) {
    error_ = e;  // published by close(): next() reads it after its pop fails
    ready_.close();
    return false;
  }

  const std::string name_;
  const int64_t epoch_samples_, global_batch_;
  Read read_;
  Finish finish_;
  const bool threaded_;  // finish on its own thread
  Channel<Item> raw_;    // I/O thread -> finish thread
  Channel<Ready> ready_;
  std::exception_ptr error_;
  // redirect(): the generation next() takes (every thread reads it), and the start and changes the
  // I/O thread has yet to take (under redirect_mu_).
  std::atomic<uint64_t> wanted_{0};
  std::mutex redirect_mu_;
  BatchIndex start_;
  std::vector<std::function<void()>> changes_;
  std::thread io_thread_, finish_thread_;
};

}  // namespace meridian::data
