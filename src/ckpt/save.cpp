// Saving a checkpoint: its contents, the atomic file (.tmp, rename, `latest`) and retention.
#include <spdlog/spdlog.h>

#include <chrono>
#include <ctime>
#include <filesystem>

#include "internal.h"
#include "meridian/ckpt/files.h"
#include "meridian/comm/mpi_interop.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/core/files.h"
#include "meridian/core/version.h"
#include "meridian/train/trainer.h"

namespace meridian::ckpt {

namespace fs = std::filesystem;

namespace {

std::string now_text() {
  const std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// Collective: every rank learns every rank's message (on `own` when given, else the world).
std::vector<std::string> agree(const comm::Runtime& rt, const comm::OwnComm* own, const std::string& mine) {
  return own ? comm::allgather_strings(rt, own->get(), mine) : rt.allgather(mine);
}

}  // namespace

void write_contents(train::StateWriter& w, train::Trainer& trainer, const Config& config) {
  const train::TrainerState state = trainer.state();
  auto& model = *trainer.task().model();
  trainer.strategy().save(w);  // the trained parameters and the optimizer state, in the strategy's layout
  for (const auto& item : model.named_parameters())  // the frozen ones (LoRA's base)
    if (!item.value().requires_grad()) w.replicated("model/" + item.key(), item.value());
  for (const auto& item : model.named_buffers()) w.replicated("model/" + item.key(), item.value());
  if (auto* ema = trainer.ema()) {
    for (size_t i = 0; i < ema->names().size(); ++i) w.replicated("ema/" + ema->names()[i], ema->tensors()[i]);
    w.attribute("ema_updates", ema->updates());
  }
  w.per_rank("torch_rng", cpu_generator().get_state());
  const auto position = trainer.task().data_position();
  w.attribute("step", state.step);
  w.attribute("epoch", position.epoch);
  w.attribute("position", position.position);
  w.attribute("samples_seen", state.samples_seen);
  w.attribute("bad_steps", state.bad_steps);
  w.attribute("bad_in_a_row", state.bad_in_a_row);
  w.attribute("global_batch", trainer.global_batch());
  w.attribute("config", config.dump());
  w.attribute("created_by", created_by());
  w.attribute("time", now_text());
}

// A checkpoint's contents as host copies of what this rank writes (its share of the rows of every

std::string write_checkpoint(const comm::Runtime& rt, const comm::OwnComm* own, const CheckpointSettings& s,
                             int64_t step, const std::function<void(Writer&)>& fill) {
  const std::string final_path = s.dir + "/" + step_name(step), tmp = final_path + ".tmp";
  std::string error;
  if (rt.rank() == 0) {
    std::error_code ec;
    fs::create_directories(s.dir, ec);
    if (ec) error = "cannot create the checkpoint directory '" + s.dir + "': " + ec.message();
  }
  const auto errors = agree(rt, own, error);
  if (!errors[0].empty()) throw SystemError(errors[0]);
  try {
    Writer w(rt, tmp, own);
    fill(w);
    w.close();  // agreed: every rank's writes are complete when it returns on any rank
  } catch (...) {
    if (rt.rank() == 0) {
      std::error_code ec;
      fs::remove(tmp, ec);
    }
    throw;
  }
  if (rt.rank() == 0) {
    try {
      if (!is_checkpoint(tmp)) throw SystemError(tmp + ": written, but does not open as a checkpoint");
      try {
        files().rename(tmp, final_path);
      } catch (...) {
        std::error_code ec;
        fs::remove(tmp, ec);  // complete but never named: nothing picks a .tmp up, yet it takes space
        throw;
      }
      std::error_code ec;
      write_file_atomically(s.dir + "/latest", step_name(step) + "\n");
      // Retention: the newest keep_last, plus multiples of keep_every.
      const auto all = list_checkpoints(s.dir);
      for (size_t i = size_t(s.keep_last); i < all.size(); ++i)
        if (all[i].second != final_path && !(s.keep_every > 0 && all[i].first % s.keep_every == 0))
          fs::remove(all[i].second, ec);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  const auto after = agree(rt, own, error);
  if (!after[0].empty()) throw SystemError(after[0]);
  return final_path;
}

std::string save(const comm::Runtime& rt, train::Trainer& trainer, const Config& config, const CheckpointSettings& s) {
  if (s.dir.empty()) throw UserError("checkpoint: no directory (give --run-dir or checkpoint.dir)");
  const auto t0 = std::chrono::steady_clock::now();
  const std::string path =
      write_checkpoint(rt, nullptr, s, trainer.state().step, [&](Writer& w) { write_contents(w, trainer, config); });
  if (rt.rank() == 0)
    spdlog::info("checkpoint {} written in {:.2f} s (training waited for all of it)", path,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return path;
}

}  // namespace meridian::ckpt
