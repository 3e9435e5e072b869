// The language-model loader: fixed-length token sequences from a `kind = text` dataset
// (docs/formats.md), for causal-LM training with prompt masking.
//
// A sample is seq_len + 1 consecutive tokens s[0..seq_len] of the file's stream; the batch gives
// tokens[t] = s[t] and targets[t] = s[t + 1] for t < seq_len, where targets[t] = -100 (no loss)
// unless s[t + 1] has loss_mask = 1 AND s[t] and s[t + 1] belong to the same document. So prompt
// tokens, padding and the first token of a document (predicted from the previous document's eos)
// are never trained on.
//
//  - Pack: the stream (all documents concatenated) is cut into W = floor((T - 1) / seq_len)
//    windows, window i = tokens [i * seq_len, i * seq_len + seq_len + 1) (consecutive windows
//    share one token). No attention masking across documents: the model sees the previous
//    document(s) in the window as context, as in standard packing; only the loss is cut at the
//    boundaries (the -100 rule above).
//  - Pad: one sample = one document, truncated to seq_len + 1 tokens; the rest is filled with the
//    stored tokenizer's pad id (DatasetInfo::pad_id: the model's pad piece, 0 when it has none),
//    whose targets are -100.
//
// Order: data::DistributedSampler over the W windows (Pack) or N documents (Pad), so (epoch,
// position) in global samples is the whole state, and resuming on another world size works as for
// data::Loader. Within a batch samples keep the sampler's position order (not sorted).
//
// Reading: a background thread reads `prefetch` batches ahead; per sample one hyperslab of /tokens
// and one of /loss_mask (never the whole dataset), under the process-wide HDF5 lock. /doc_offsets
// ([N + 1] int64, 8 bytes per document) is held in memory to find document boundaries.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "meridian/data/format.h"
#include "meridian/data/sampler.h"

namespace meridian::comm {
class Runtime;
}

namespace meridian::data {

inline constexpr int64_t kIgnoreIndex = -100;  // targets without loss (torch cross_entropy's ignore_index)

struct TextLoaderOptions {
  enum Mode { Pack, Pad };
  std::string path;
  int64_t seq_len = 512;
  int64_t batch_size = 8;  // per rank
  uint64_t seed = 0;
  Mode mode = Pack;
  bool drop_last = true;  // as DistributedSampler
  int64_t epoch = 0;      // where to start (from a checkpoint)
  int64_t position = 0;   // global samples already consumed in `epoch`
  int prefetch = 2;       // batches ready ahead
  // The batches' tensors in pinned (page-locked) host memory: set on GPU ranks, whose copies to the
  // device are then asynchronous DMA (train::BatchCopier). Needs a CUDA LibTorch and driver.
  bool pinned = false;
};

struct TextBatch {
  at::Tensor tokens;   // [B, seq_len] int64
  at::Tensor targets;  // [B, seq_len] int64, kIgnoreIndex where there is no loss
  at::Tensor rows;     // [B] int64: window index (Pack) or document index (Pad), in position order
  int64_t epoch = 0;
  int64_t step = 0;           // global batch index within the epoch
  int64_t next_position = 0;  // global position after this batch
  double wait_s = 0;          // time next() waited for this batch
};

class TextLoader {
 public:
  // Collective: every rank validates and opens the file; a file that is not kind `text`, an error
  // on any rank, or ranks that see different files is a UserError on every rank.
  TextLoader(const comm::Runtime& runtime, const TextLoaderOptions& options);
  ~TextLoader();  // not collective: stops the thread
  TextLoader(const TextLoader&) = delete;
  TextLoader& operator=(const TextLoader&) = delete;

  // Blocks until the next batch is ready; epochs follow each other without end. A read error on
  // the I/O thread is rethrown here.
  TextBatch next();
  // Consumer thread: from the batch at (epoch, position) on, this rank's part of each global batch
  // is shares[rank] samples (DistributedSampler::set_shares; empty: even); what was read ahead is
  // dropped and read again, by the same threads (no restart). Not collective, but every rank must
  // pass the same shares. std::invalid_argument on shares the sampler refuses.
  void set_shares(const std::vector<int64_t>& shares, int64_t epoch, int64_t position);

  const DatasetInfo& info() const;
  const DistributedSampler& sampler() const;
  int64_t samples() const;  // W windows (Pack) or N documents (Pad)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace meridian::data
