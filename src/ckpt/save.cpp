// Saving a checkpoint: its contents, the atomic file (.tmp, fsync, rename, the directory's fsync,
// `latest`) and retention.
#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>

#include "internal.h"
#include "meridian/ckpt/files.h"
#include "meridian/comm/agree.h"
#include "meridian/comm/mpi_interop.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/train/trainer.h"

namespace meridian::ckpt {

namespace {

// The fail of comm::agree for a step rank 0 alone takes: its message, as a SystemError on every rank.
void rank0_failed(const comm::Failure& f) { throw SystemError(f.message); }

}  // namespace

void write_contents(train::StateWriter& w, train::Trainer& trainer, const Config& config) {
  trainer.strategy().save(w);  // the trained parameters and the optimizer state, in the strategy's layout
  save_trainer_state(w, trainer, config);
}

std::string write_checkpoint(const comm::Runtime& rt, const comm::OwnComm* own, const CheckpointSettings& s,
                             int64_t step, const std::function<void(Writer&)>& fill) {
  const std::string final_path = s.dir + "/" + step_name(step), tmp = final_path + ".tmp";
  Files& env = files();
  // Removes a .tmp on the way out of a failure already being reported.
  const auto drop_tmp = [&] {
    try {
      env.remove(tmp);
    } catch (const std::exception&) {
    }
  };
  comm::agree(
      rt, own,
      [&] {
        if (rt.rank() == 0) env.create_dir(s.dir);
      },
      rank0_failed);
  try {
    Writer w(rt, tmp, own);
    fill(w);
    w.close();  // agreed: every rank's writes are complete (and fsynced) when it returns on any rank
    if (rt.rank() == 0) spdlog::info("checkpoint step {}: whole-file checksum in {:.3f} s", step, w.seal_seconds());
  } catch (...) {
    if (rt.rank() == 0) drop_tmp();
    throw;
  }
  comm::agree(
      rt, own,
      [&] {
        if (rt.rank() != 0) return;
        if (!is_checkpoint(tmp)) throw SystemError(tmp + ": written, but does not open as a checkpoint");
        try {
          env.rename(tmp, final_path);
        } catch (...) {
          drop_tmp();  // complete but never named: nothing picks a .tmp up, yet it takes space
          throw;
        }
        // The new name durable before `latest` may name it (a failure here leaves `latest` as it was;
        // the complete file stays and a resume moves it aside as newer than `latest`'s).
        env.sync_dir(s.dir);
        env.write_small(s.dir + "/latest", step_name(step) + "\n");
        // Retention: the newest keep_last, plus multiples of keep_every, plus the one best.h5 names.
        try {
          const auto all = list_checkpoints(s.dir);
          const auto best = env.read_link(s.dir + "/" + kBestName);
          for (size_t i = size_t(s.keep_last); i < all.size(); ++i)
            if (all[i].second != final_path && !(s.keep_every > 0 && all[i].first % s.keep_every == 0) &&
                !(best && all[i].second == s.dir + "/" + *best))
              env.remove(all[i].second);
        } catch (const std::exception& e) {
          throw SystemError(final_path + " was written and `latest` names it, but retention failed: " + e.what());
        }
      },
      rank0_failed);
  return final_path;
}

void point_best(const comm::Runtime& rt, const CheckpointSettings& s, const std::string& checkpoint) {
  comm::agree(
      rt, nullptr,
      [&] {
        if (rt.rank() != 0) return;
        Files& env = files();
        env.link(std::filesystem::path(checkpoint).filename().string(), s.dir + "/" + kBestName);
        env.sync_dir(s.dir);
        spdlog::info("checkpoint.best {}: {} -> {}", s.best, kBestName, checkpoint);
      },
      rank0_failed);
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
