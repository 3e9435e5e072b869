#include "meridian/train/batch_copier.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <optional>

namespace meridian::train {

struct BatchCopier::Impl {
  c10::Device device;
  std::optional<c10::cuda::CUDAStream> stream;  // the side stream of the copies (GPU ranks)
  std::optional<at::cuda::CUDAEvent> done;      // the last copy's completion
  std::vector<at::Tensor> held;                 // its host tensors, until `done`

  void release() {
    if (done) done->synchronize();  // that copy alone: the step that used it has been queued since
    held.clear();
    done.reset();
  }
};

BatchCopier::BatchCopier(c10::Device device) : impl_(std::make_unique<Impl>(Impl{device, {}, {}, {}})) {
  if (device.is_cuda()) impl_->stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
}

BatchCopier::~BatchCopier() { impl_->release(); }

std::vector<at::Tensor> BatchCopier::to_device(const std::vector<at::Tensor>& host) {
  auto& m = *impl_;
  if (!m.device.is_cuda()) return host;
  m.release();
  const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(m.device.index());
  std::vector<at::Tensor> out;
  {
    const c10::cuda::CUDAStreamGuard on_side(*m.stream);
    for (const auto& t : host) {
      const at::Tensor dense = t.contiguous();
      const at::Tensor pinned = dense.is_pinned() ? dense : dense.pin_memory();
      m.held.push_back(pinned);
      out.push_back(pinned.to(m.device, /*non_blocking=*/true));
    }
  }
  m.done.emplace();
  m.done->record(*m.stream);
  m.done->block(compute);  // the compute stream waits for the copies; the host does not
  // Allocated on the side stream, used on the compute one: the caching allocator must not hand
  // their memory to the side stream again before the compute stream is done with them.
  for (auto& t : out) t.record_stream(compute);
  return out;
}

}  // namespace meridian::train
