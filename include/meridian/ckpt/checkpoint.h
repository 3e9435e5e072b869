// Checkpoints of a training run: when to save, what a checkpoint holds, atomic files, retention,
// and resuming (exactly on the same world size, elastically on another).
//
//   <run>/checkpoints/step_<8 digits>.h5   one per save (ckpt::Writer: collective MPI-IO)
//   <run>/checkpoints/latest               the newest complete checkpoint's file name
//   <run>/checkpoints/best.h5              checkpoint.best: a link to the checkpoint of the best
//                                          evaluation so far (kept by retention while it is the best)
//
// A save writes step_N.h5.tmp, closes and fsyncs it (collective), then rank 0 renames it to
// step_N.h5, fsyncs the directory and replaces `latest` (written to latest.tmp and renamed): a crash
// at any moment leaves the previous checkpoint usable. A failed write (full disk, unwritable
// directory) is a SystemError on every rank; the .tmp file is removed and the previous checkpoint
// kept. Every file operation goes through ckpt::Files (files.h).
//
// Contents: model/<parameter or buffer name>, optim/<parameter name>/step, the AdamW moments as
// optim/<parameter name>/{exp_avg, exp_avg_sq} or, with optim.zero, as the flat vectors
// optim/flat/{exp_avg, exp_avg_sq} that every rank writes its shard of (parameter order in the
// root attribute optim_flat); either form resumes into either optimizer on any world size;
// SGD (optim.name sgd): optim/<parameter name>/{momentum_buffer, step}; root attribute optimizer
// (adamw | sgd; a run resumes only from its own kind). Model EMA (train.ema): ema/<parameter or
// buffer name> and root attribute ema_updates.
// ranks/<r>/torch_rng (the CPU generator) and, on a GPU rank, ranks/<r>/device_rng (its CUDA
// generator: device_generator), and root attributes step, epoch, position (global samples consumed in the
// epoch), samples_seen, bad_steps, bad_in_a_row, global_batch, config (YAML), created_by, time.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meridian/core/config_schema.h"

namespace meridian::comm {
class Runtime;
}
namespace meridian::train {
class Trainer;
}
namespace torch::nn {
class Module;
}

namespace meridian::ckpt {

class Reader;

// The `checkpoint:` section; ConfigError names the field.
struct CheckpointSettings {
  std::string dir;                 // default <run_dir>/checkpoints
  int64_t every_steps = 0;         // 0: not by steps
  double every_minutes = 0;        // 0: not by time
  int64_t keep_last = 3;           // checkpoints kept (older ones deleted), >= 1
  int64_t keep_every = 0;          // also keep every checkpoint whose step is a multiple of this (0: none)
  bool at_end = true;              // save after the last step
  bool async = false;              // copy to host memory at the step, write in a background thread
  std::string best;                // an evaluation metric: its best value's checkpoint is linked as best.h5; "": none
  std::string best_mode = "auto";  // max | min | auto (min for a loss or perplexity, else max)
  bool best_maximize() const;      // whether a larger `best` is better
  static CheckpointSettings from_config(const Config& config, const std::string& run_dir);
  // Declares the checkpoint: keys (types, defaults from this struct, ranges, meanings).
  static void declare(ConfigSchema& schema);
};

// What resuming needs before the task and trainer exist (the loader starts at epoch/position).
struct ResumePoint {
  std::string path;
  int64_t step = 0, epoch = 0, position = 0, global_batch = 0, world_size = 0;
  std::string config_yaml;
};

// Not collective. The newest checkpoint in `dir` that opens and whose checksums verify; each
// rejected newer one is described in `rejected`. nullopt when there is none. SystemError when the
// directory cannot be listed (ckpt::Files).
std::optional<ResumePoint> find_resumable(const std::string& dir, std::vector<std::string>* rejected);
// Not collective: the config a checkpoint's run was trained with (its `config` attribute), with
// origin "<path> (config)" for error messages.
Config saved_config(const Reader& reader);

// Not collective: the resume point of one file (DataError if it is not a valid checkpoint).
ResumePoint read_resume_point(const std::string& path, bool verify);

// Collective: `resume` is "" (fresh start), "auto" (newest valid checkpoint in settings.dir, or a
// fresh start when there is none) or a path. Rank 0 chooses and verifies, every rank gets the same
// answer. Logs what was rejected and why. Checkpoints newer than the chosen one are renamed to
// <name>.abandoned. UserError "--resume <resume>: ..." on every rank when rank 0 cannot choose (no
// valid file at the path given, the directory or `latest` unreadable, a rename that fails).
// `skipped` (rank 0): each checkpoint passed over as corrupt or unreadable, "<path>: <why>".
std::optional<ResumePoint> choose_resume_point(const comm::Runtime& runtime, const std::string& resume,
                                               const std::string& dir, std::vector<std::string>* skipped = nullptr);

// Not collective. The per-rank batch that keeps the checkpoint's global batch on `world_size` ranks
// with `accumulate` micro-steps (elastic resume): `batch` itself when it already does. UserError
// naming the checkpoint when the global batch does not divide into world_size x accumulate.
int64_t resume_batch(const ResumePoint& point, int world_size, int64_t accumulate, int64_t batch);

// Compares a checkpoint's config with the current one: a difference under model: (or task.name /
// task.loss / train.seed) is a UserError listing them; other differences are returned, for the log
// (whether the optimizer state loads is the strategy's to say: Strategy::load names both kinds).
std::vector<std::string> compare_configs(const Config& saved, const Config& current, const std::string& path);

// Collective: writes the trainer's state as checkpoint step_<step>.h5 in settings.dir, atomically,
// then applies retention. Returns the final path. SystemError on every rank when any rank's part
// fails (`latest` then names the previous checkpoint; the new file is either gone or complete), or
// when retention cannot remove or list (`latest` then names the new checkpoint).
std::string save(const comm::Runtime& runtime, train::Trainer& trainer, const Config& config,
                 const CheckpointSettings& settings);

// The random generator of the device a rank trains on, whose state a checkpoint keeps beside the
// CPU's (ranks/<r>/device_rng): random ops on a GPU rank (LoRA dropout, ...) draw from its CUDA
// generator, so without it a resumed run would not be bit-identical. Undefined for the CPU. Not
// collective.
at::Generator device_generator(const c10::Device& device);
// For tests: replaces how device_generator resolves a device (a CPU generator standing in for a
// GPU's where none is present); returns the resolver in force before. An empty function restores the
// default.
using DeviceGeneratorResolver = std::function<at::Generator(const c10::Device&)>;
DeviceGeneratorResolver set_device_generator_resolver(DeviceGeneratorResolver resolver);

// Collective: loads parameters, buffers, optimizer state, the EMA (when the trainer has one),
// counters and this rank's RNG states (CPU and device; rank r takes rank r mod W's on another
// world size W) into a trainer built from the same config.
// Each rank reads (and checksums) only its share of the rows of every tensor over 64 KiB; an
// allgather assembles them, so N ranks read the file once between them, not N times.
// DataError naming the dataset if a tensor is missing or has another shape (also ema/* and
// ema_updates when the trainer has an EMA and the checkpoint none); UserError naming both when the
// checkpoint's optimizer (adamw, ZeRO included, or sgd) is not the trainer's.
void restore(const comm::Runtime& runtime, train::Trainer& trainer, const ResumePoint& point);

// Whether readers verify a checkpoint's whole-file checksum before HDF5 opens it (default true;
// `--no-verify` turns it off for a file the user wants read regardless). Not collective: every rank
// sets the same.
void set_verify_checksums(bool verify);

// Which weights load_module takes: PreferEma: ema/<name> when the checkpoint has EMA weights (root
// attribute ema_updates: they are the ones to evaluate), else model/<name>; Model: always
// model/<name> (the raw training weights).
enum class Weights { PreferEma, Model };

// Not collective: copies the checkpoint's weights (see Weights) into a module's parameters and
// buffers (by name, in place) and logs (spdlog info, on the calling process) which were used.
// Returns true when the EMA weights were loaded. DataError naming the dataset if one is missing or
// has another shape.
bool load_module(const std::string& path, torch::nn::Module& module, Weights weights);
// The same with Weights::PreferEma.
void load_module(const std::string& path, torch::nn::Module& module);

// Saves every `every_steps` steps / `every_minutes` minutes, after the last step (at_end), when
// the trainer stops on a signal (SIGTERM/SIGUSR1), when an observer of the loop asks for it
// (StepEvent::save), and at a step whose evaluation is the best so far (StepEvent::best), then points
// best.h5 at that checkpoint (agreed; a background save is waited for first): an observer of the
// trainer's on_save point (train/observer.h).
// checkpoint.async: at the step, every rank copies what it writes (its share of the rows, its
// shards) to host memory, then a background thread writes the file through its own duplicate of
// the world while training goes on; the next save first waits for it (at most one in flight), and
// the last one (end of run, stop) is waited for before the hook returns. `latest` moves only after
// every rank's write completed (agreed) and the file opens: a rank killed during a background
// write leaves the previous checkpoint as `latest`. A failed background write is a SystemError on
// every rank at the next save (or at the end of the run).
class Checkpointer {
 public:
  Checkpointer(const comm::Runtime& runtime, train::Trainer& trainer, const Config& config,
               CheckpointSettings settings);
  ~Checkpointer();  // waits for a background save in flight (logs, does not throw, if it failed)
  const std::string& last_saved() const { return last_; }

 private:
  struct Background;
  std::unique_ptr<Background> background_;
  std::string last_;
};

}  // namespace meridian::ckpt
