// Private to ckpt: what its files share.
#pragma once

#include <ATen/CPUGeneratorImpl.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "meridian/ckpt/checkpoint.h"
#include "meridian/ckpt/file.h"
#include "meridian/core/config.h"
#include "meridian/train/state_io.h"

namespace meridian::ckpt {

// step_<8 digits>.h5
std::string step_name(int64_t step);
// The link to checkpoint.best's checkpoint, in the checkpoint directory.
inline constexpr const char* kBestName = "best.h5";
// Checkpoint files in `dir`, newest (highest step) first.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir);

inline at::Generator cpu_generator() { return at::detail::getDefaultCPUGenerator(); }

// Collective: the trainer's part of a checkpoint besides its strategy's (trainer_state.cpp): the
// frozen parameters and buffers, the EMA, every rank's RNG and the counters.
void save_trainer_state(train::StateWriter& w, train::Trainer& trainer, const Config& config);
// Collective (r.load): loads what save_trainer_state wrote into a trainer built from the same config
// and sets its counters from `point`'s file. `rank` takes ranks/<rank mod point.world_size>/torch_rng.
// DataError naming the dataset when a tensor is missing or has another shape (also the EMA's when
// the trainer has one and the checkpoint none).
void load_trainer_state(train::StateReader& r, int rank, train::Trainer& trainer, const ResumePoint& point);

// Collective: everything a checkpoint holds, through a Writer (a save now) or a Recorder (a host
// copy for a background save): the strategy's trained parameters and optimizer state, the frozen
// parameters and buffers, the EMA, every rank's RNG and the counters.
void write_contents(train::StateWriter& w, train::Trainer& trainer, const Config& config);

// Collective: creates the directory (rank 0), writes `fill` into step_<step>.h5.tmp, closes it, then
// rank 0 renames it to step_<step>.h5, moves `latest` to it and applies retention. A failure on any
// rank is a SystemError on every rank and leaves the previous checkpoint as `latest`. Collectives
// run on `own` when given (a background save's duplicate of the world), else on the world.
std::string write_checkpoint(const comm::Runtime& rt, const comm::OwnComm* own, const CheckpointSettings& s,
                             int64_t step, const std::function<void(Writer&)>& fill);

// Collective (agreed): rank 0 points <dir>/best.h5 at the complete checkpoint `checkpoint` and syncs
// the directory. SystemError on every rank when it cannot.
void point_best(const comm::Runtime& rt, const CheckpointSettings& s, const std::string& checkpoint);

}  // namespace meridian::ckpt
