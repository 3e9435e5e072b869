// Host batches to the rank's device, for train::Task implementations (their next_batch()).
//
// On a GPU rank the copies run on a side stream, from pinned memory (the loaders fill pinned buffers
// there: LoaderOptions::pinned and its kin), and the host does not wait: the caller's current stream
// waits for them on an event, so the step's kernels start once the batch is there and the next
// batch's copy overlaps this step's compute. The host tensors of a copy are held until the copy is
// known complete (at the next call, a wait for that copy alone, long done in practice): a loader that
// reuses its pinned buffers once nothing else holds them cannot overwrite one in flight. On the CPU
// the tensors are returned as they are.
//
// Not thread-safe: the training thread's. Not collective.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <vector>

namespace meridian::train {

class BatchCopier {
 public:
  explicit BatchCopier(c10::Device device);
  ~BatchCopier();  // waits for the last copy
  BatchCopier(const BatchCopier&) = delete;
  BatchCopier& operator=(const BatchCopier&) = delete;

  // The tensors on the device, in order. Host tensors that are not pinned are first copied into pinned
  // memory (slower: a host copy each).
  std::vector<at::Tensor> to_device(const std::vector<at::Tensor>& host);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace meridian::train
