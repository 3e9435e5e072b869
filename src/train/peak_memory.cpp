#include "peak_memory.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>

#include "meridian/comm/communicator.h"
#include "meridian/comm/runtime.h"

namespace meridian::train {

void PeakMemory::on_step_end(const StepEvent& event, const StepResult&, LoopControl&) {
  if (event.steps_done != std::min(first_ + 3, steps_)) return;
  double mine = 0;
  if (rt_.device().is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(rt_.device().index());
    mine = double(stats.allocated_bytes[size_t(c10::CachingAllocator::StatType::AGGREGATE)].peak);
  } else {
    struct rusage usage {};
    getrusage(RUSAGE_SELF, &usage);
    mine = double(usage.ru_maxrss) * 1024;  // KiB on Linux
  }
  at::Tensor peaks = at::tensor({mine, -mine}, at::kDouble);
  control_.allreduce(peaks, comm::ReduceOp::Max);
  const auto closed_form = strategy_.memory();
  if (rt_.rank() != 0 || !closed_form) return;
  const double gib = double(int64_t(1) << 30);
  spdlog::info(
      "memory after {} step(s): peak {} {:.2f} GiB per rank (max over ranks; min {:.2f}); closed form "
      "of optim.zero {}: {:.2f} GiB before activations",
      event.steps_done - first_, rt_.device().is_cuda() ? "GPU allocated" : "resident", peaks[0].item<double>() / gib,
      -peaks[1].item<double>() / gib, closed_form->stage, double(closed_form->total()) / gib);
}

}  // namespace meridian::train
