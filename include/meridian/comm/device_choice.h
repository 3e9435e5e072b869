// Which device a rank takes (device_choice.cpp): a pure function of what the Runtime gathers from the
// node's ranks at start-up, so that launchers' ways of handing out GPUs are tested without GPUs
// (tests/comm/device_choice_test.cpp).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace meridian::comm {

// What a rank's device is chosen from (Runtime gathers it; choose_device is pure).
struct DeviceInputs {
  std::string requested = "auto";  // --device: auto, cpu, cuda
  int visible = 0;                 // CUDA devices this process sees (after CUDA_VISIBLE_DEVICES)
  int local_rank = 0, local_size = 1;
  // CUDA_VISIBLE_DEVICES of each rank on this node, by local rank; nullopt where it is unset.
  std::vector<std::optional<std::string>> visible_env;
  std::string host;     // for messages
  std::string no_gpus;  // what CUDA said when it found no device ("cudaGetDeviceCount: ...")
};
struct DeviceChoice {
  int cuda_index = -1;  // the CUDA device among this rank's visible ones; -1: the CPU
  std::string why;      // "cuda:1: local rank 1 of the node's 4 ranks, which all see the same 4 GPUs ..."
  std::string error;    // non-empty: the run cannot start (names the variable to change)
};
// A rank's device, as launchers hand out GPUs:
//  * every rank of the node sees the same GPUs (CUDA_VISIBLE_DEVICES the same or unset everywhere:
//    mpirun, srun --gpus-per-node): the local rank's GPU among them; more ranks than GPUs is refused;
//  * each rank sees GPUs of its own (CUDA_VISIBLE_DEVICES differs between the node's ranks: Slurm's
//    --gpus-per-task=1, site wrappers): its first visible GPU, cuda:0. Refused when two ranks would
//    take the same GPU (the same first entry) or when the variable is set for only some ranks.
// auto falls back to the CPU only when no GPU is visible. Every rank of a node decides from the same
// inputs, so they agree. Not collective.
DeviceChoice choose_device(const DeviceInputs& in);

}  // namespace meridian::comm
