// A training run end to end, as `meridian train` and `meridian bench train` do it: the resolved
// config checked on every rank, the resume point, the task and the trainer, checkpoints.
#pragma once

#include <string>

#include "meridian/core/config.h"
#include "meridian/train/trainer.h"

namespace meridian::comm {
class Runtime;
}

namespace meridian::tasks {

// Collective: every rank's resolved config (defaults filled in) and its --run-dir and --resume must be
// rank 0's; UserError on every rank naming the ranks and the first differing key otherwise (instead
// of a hang, or ranks applying different updates).
void require_same_run(const comm::Runtime& runtime, const Config& config, const std::string& run_dir,
                      const std::string& resume);

// Collective: trains `config` (checked by validate_config; data.train set) in `run_dir`. `resume`:
// "" (from scratch), "auto" or a checkpoint path (ckpt::choose_resume_point); a checkpoint of another
// world size keeps its global batch (ckpt::resume_batch). Records the dataset's description in the
// config (describe_data), builds the task and the trainer, restores, checkpoints as configured
// (checkpoint: keys) and runs. SIGTERM/SIGUSR1 from the start end with a checkpoint.
train::TrainSummary run_training(const comm::Runtime& runtime, Config config, const std::string& run_dir,
                                 const std::string& resume, const train::InjectedStraggler& straggler = {},
                                 const std::string& trace_path = "");

// Collective (a barrier, then every rank at once, as in training): this rank's float32 rate of a
// 1024 x 1024 x 1024 matmul on its device and threads, in FLOP/s.
double matmul_rate(const comm::Runtime& runtime);

}  // namespace meridian::tasks
