// The detection training loader: every rank reads its share of each global batch of a `detection`
// dataset (docs/formats.md) with the boxes of each image, ahead of time, optionally augmented
// (box_augment.h: mosaic or random affine, HSV, flip).
//
// Pipeline per rank, as the image-text Loader: an I/O thread reads each batch (rows from the
// DistributedSampler, sorted; one read per run of consecutive rows) and, for mosaics, the 3
// partner rows of each image; with augmentation a second thread augments while the next batch is
// read. `prefetch` batches wait ready in a queue. Order within a batch is ascending row order.
//
// Determinism: rows come from the sampler (seed, epoch, position); each image's augmentation and
// its mosaic partners from (seed, epoch, row) only, so a batch's content does not depend on the
// number of ranks, the prefetch depth or the thread timing.
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "meridian/data/box_augment.h"
#include "meridian/data/format.h"
#include "meridian/data/sampler.h"

namespace meridian::comm {
class Runtime;
}

namespace meridian::data {

struct DetectionLoaderOptions {
  std::string path;
  int64_t batch_size = 16;  // per rank
  int prefetch = 4;         // batches ready ahead
  uint64_t seed = 0;
  bool drop_last = true;
  int image_size = 0;        // output S; 0: the stored size. Another size resizes each stored
                             // (square, letterboxed) image and its boxes before augmenting.
  DetectionAugment augment;  // augment.enabled = false: the stored images and boxes as they are
  // Mosaic off from this epoch on (YOLO's close_mosaic: the last epochs train on single images);
  // -1: never. Keyed by epoch, not by a call, so it is exact across prefetch and resume.
  int64_t close_mosaic_epoch = -1;
  int64_t epoch = 0;     // where to start (from a checkpoint)
  int64_t position = 0;  // global samples already consumed in `epoch`
  int workers = 1;       // jpeg files: threads that decode each batch's images (the I/O thread included)
  // The batches' tensors in pinned (page-locked) host memory: set on GPU ranks, whose copies to the
  // device are then asynchronous DMA (train::BatchCopier). Needs a CUDA LibTorch and driver.
  bool pinned = false;
};

struct DetectionBatch {
  at::Tensor images;       // [B, 3, S, S] uint8, RGB, channels first
  at::Tensor boxes;        // [M, 4] float32 x_min, y_min, x_max, y_max in pixels of the output image (pixel edges)
  at::Tensor classes;      // [M] int64, index into info().class_names
  at::Tensor box_offsets;  // [B + 1] int64: image i owns boxes [box_offsets[i], box_offsets[i + 1])
  at::Tensor rows;         // [B] int64 dataset rows, in the order of `images`
  int64_t epoch = 0;
  int64_t step = 0;           // global batch index within the epoch
  int64_t next_position = 0;  // global position after this batch (checkpoint this with `epoch`)
  double wait_s = 0;          // time next() waited for this batch (data stall)
};

class DetectionLoader {
 public:
  // Collective: every rank opens the file (read-only, POSIX driver) and validates it (a DataError
  // names the file and field; a non-detection file is refused); all ranks agree on success, then
  // compare what they see (size, attributes, first image) and throw a UserError on every rank naming
  // the ranks and hosts that differ. Bad options are UserErrors (identical on every rank). Then the
  // threads start.
  DetectionLoader(const comm::Runtime& runtime, const DetectionLoaderOptions& options);
  ~DetectionLoader();  // not collective: stops the threads
  DetectionLoader(const DetectionLoader&) = delete;
  DetectionLoader& operator=(const DetectionLoader&) = delete;

  // Blocks until the next batch is ready. Epochs follow each other without end. An I/O or
  // augmentation error on a loader thread is rethrown here. One consumer thread.
  DetectionBatch next();
  // Consumer thread: from the batch at (epoch, position) on, this rank's part of each global batch
  // is shares[rank] samples (DistributedSampler::set_shares; empty: even); what was read ahead is
  // dropped and read again, by the same threads (no restart). Not collective, but every rank must
  // pass the same shares. std::invalid_argument on shares the sampler refuses.
  void set_shares(const std::vector<int64_t>& shares, int64_t epoch, int64_t position);

  const DatasetInfo& info() const;
  const DistributedSampler& sampler() const;
  int image_size() const;  // S of the batches

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The key of row `row`'s augmentation in `epoch` (and of its mosaic partners): the same on every rank.
uint64_t detection_augment_key(uint64_t seed, int64_t epoch, int64_t row);
// The 3 mosaic partners of row `row` (of n) with augmentation key `key`: rows drawn uniformly from
// the others (with repeats; the row itself only when n = 1).
std::array<int64_t, 3> mosaic_partners(uint64_t key, int64_t row, int64_t n);

}  // namespace meridian::data
