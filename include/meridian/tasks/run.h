// A training run end to end, as `meridian train` and `meridian bench train` do it: the resolved
// config checked on every rank, the resume point, the task and the trainer, checkpoints.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "meridian/ckpt/checkpoint.h"
#include "meridian/core/config.h"
#include "meridian/train/settings.h"
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

// A training run's config resolved in one pass, top down, and what the rest of the run reads:
//   1. the caller's config: the file, --data, --set and task.init's config.json (apply_init_config),
//      checked by validate_config;
//   2. the resume point (`resume`: "", "auto" or a path; ckpt::choose_resume_point): the
//      checkpoint's train.accumulate when the config leaves it unset, and train.batch for the
//      checkpoint's global batch on this many ranks (ckpt::resume_batch, an elastic resume);
//   3. the task's policy (describe_data, TaskSpec::resolve): what a checkpoint must know about the
//      data, optim.name auto -- decided for the global batch of 2, which is why the resume comes first;
//   4. the settings structs, each built once from the result (the checkpoint: keys, which none of
//      this changes, at the start: they say where the resume point is).
// Nothing changes `config` after this; every key's Config::source says where its value came from.
struct ResolvedRun {
  Config config;
  train::TrainerSettings trainer;  // train.epochs and optim.warmup_ratio still to apply (resolve_length)
  ckpt::CheckpointSettings checkpoint;
  std::optional<ckpt::ResumePoint> resume;
  std::vector<std::string> skipped;   // rank 0: checkpoints --resume auto passed over, "<path>: <why>"
  train::DataPosition start;          // where the training data resumes
  std::vector<std::string> notes;     // what the pass decided and why, for rank 0's log
  std::vector<std::string> warnings;  // what it turned off and why (checkpoint.best without data.eval)
};

// Collective (the resume point is chosen by rank 0 for every rank). ConfigError/UserError as the
// steps above.
ResolvedRun resolve_run(const comm::Runtime& runtime, Config config, const std::string& run_dir,
                        const std::string& resume);

// Not collective: `config` as --print-config shows it: every key with its value (defaults filled in)
// and, as a comment, where the value came from (a file and line, --set, --data, --init's
// config.json field, the task's policy, the resume point, or "default").
std::string annotated_config(const Config& config);

// Collective: trains `config` (checked by validate_config; data.train set) in `run_dir`. `resume`:
// "" (from scratch), "auto" or a checkpoint path (ckpt::choose_resume_point); a checkpoint of another
// world size keeps its global batch (ckpt::resume_batch). Resolves the run (resolve_run), builds the
// task and the trainer, restores, checkpoints as configured (checkpoint: keys) and runs. SIGTERM/SIGUSR1 from the start
// end with a checkpoint.
train::TrainSummary run_training(const comm::Runtime& runtime, Config config, const std::string& run_dir,
                                 const std::string& resume, const train::InjectedStraggler& straggler = {},
                                 const std::string& trace_path = "", bool count_syncs = false);

}  // namespace meridian::tasks
