// The training data loader: every rank reads its share of each global batch from the dataset file,
// ahead of time.
//
// Pipeline per rank: an I/O thread reads each batch (rows sorted; one read per run of consecutive
// rows, see DatasetReader::read_rows) into reused buffers and picks one caption per sample; for a
// jpeg file (or with augmentation) a finish thread and its `workers - 1` helpers decode each image
// straight into the batch buffer, then crop and flip. `prefetch` batches wait ready in a queue, so reading
// overlaps training. Order within a batch is ascending row order.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "meridian/data/dataset_reader.h"
#include "meridian/data/format.h"
#include "meridian/data/sampler.h"

namespace meridian::comm {
class Runtime;
}

namespace meridian::data {

struct LoaderOptions {
  std::string path;
  int64_t batch_size = 32;  // per rank
  int prefetch = 4;         // batches ready ahead
  uint64_t seed = 0;
  bool drop_last = true;
  bool augment = false;  // random resized crop (area 0.5-1, aspect 3/4-4/3) + horizontal flip
  // Threads that decode (jpeg files) and augment each batch, the finish thread included: batch
  // samples are shared among them. Raw files without augmentation need none.
  int workers = 1;
  int crop_size = 0;     // output image size with augment; 0: the stored size
  int64_t epoch = 0;     // where to start (from a checkpoint)
  int64_t position = 0;  // global samples already consumed in `epoch`
  // MPI-IO on MPI_COMM_SELF (independent reads) or POSIX; within noise of each other on random
  // batches (docs/performance.md).
  IoDriver driver = IoDriver::MPIO;
  // The batches' tensors in pinned (page-locked) host memory: set on GPU ranks, whose copies to the
  // device are then asynchronous DMA (train::BatchCopier). Needs a CUDA LibTorch and driver.
  bool pinned = false;
};

struct Batch {
  at::Tensor images;   // [B, S, S, 3] uint8, RGB
  at::Tensor tokens;   // [B, L] int32: one of the K captions, chosen from (seed, epoch, row)
  at::Tensor lengths;  // [B] int32
  at::Tensor labels;   // [B] int32, -1 when unknown
  at::Tensor rows;     // [B] int64 dataset rows, in the order of the tensors above
  int64_t epoch = 0;
  int64_t step = 0;           // global batch index within the epoch
  int64_t next_position = 0;  // global position after this batch (checkpoint this with `epoch` of the next batch)
  double wait_s = 0;          // time next() waited for this batch (data stall)
};

class Loader {
 public:
  // Collective: every rank opens the file (read-only), then all ranks compare what they see (size,
  // attributes, first chunk); a difference is a UserError on every rank naming the ranks and hosts
  // that differ (e.g. a data path that points elsewhere on one node). Then the threads start.
  Loader(const comm::Runtime& runtime, const LoaderOptions& options);
  ~Loader();  // not collective: stops the threads
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Blocks until the next batch is ready. Epochs follow each other without end. An I/O error on the
  // reader thread is rethrown here.
  Batch next();
  // Consumer thread: from the batch at (epoch, position) on, this rank's part of each global batch
  // is shares[rank] samples (DistributedSampler::set_shares; empty: even); what was read ahead is
  // dropped and read again, by the same threads (no restart). Not collective, but every rank must
  // pass the same shares. std::invalid_argument on shares the sampler refuses.
  void set_shares(const std::vector<int64_t>& shares, int64_t epoch, int64_t position);

  const DatasetInfo& info() const;
  const DistributedSampler& sampler() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// data.workers as configured, or for 0 (the default): 1 on a CPU rank, whose cores the model uses, 4
// on a GPU rank, which waits on them.
inline int loader_workers(int64_t configured, bool cuda) { return configured > 0 ? int(configured) : cuda ? 4 : 1; }

// Deterministic augmentation of one image [H, W, 3] uint8 to [size, size, 3] uint8, from `key`.
at::Tensor augment_image(const at::Tensor& image, int size, uint64_t key);

}  // namespace meridian::data
