#include "meridian/tasks/run.h"

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <optional>

#include "meridian/ckpt/checkpoint.h"
#include "meridian/comm/runtime.h"
#include "meridian/tasks/registry.h"
#include "meridian/train/settings.h"

namespace meridian::tasks {

void require_same_run(const comm::Runtime& rt, const Config& config, const std::string& run_dir,
                      const std::string& resume) {
  const Config full = with_defaults(config);
  std::vector<std::pair<std::string, std::string>> settings{{"--run-dir", run_dir}, {"--resume", resume}};
  for (const auto& key : full.leaf_keys()) settings.emplace_back(key, full.text(key));
  comm::require_same_on_every_rank(rt, "the training config", settings);
}

train::TrainSummary run_training(const comm::Runtime& rt, Config config, const std::string& run_dir,
                                 const std::string& resume, const train::InjectedStraggler& straggler,
                                 const std::string& trace_path) {
  train::install_stop_signals();  // from the start: a signal while the data opens still ends with a checkpoint
  const auto ckpt_settings = ckpt::CheckpointSettings::from_config(config, run_dir);
  const auto point = ckpt::choose_resume_point(rt, resume, ckpt_settings.dir);
  train::DataPosition start;
  std::optional<Config> saved;  // the checkpoint's config
  if (point) {
    // A resumed detect run with optim.name auto decides for the checkpoint's global batch: its
    // train.accumulate and train.batch first.
    saved = Config::parse(point->config_yaml, point->path);
    if (!config.has("train.accumulate") && saved->has("train.accumulate"))
      config.set("train.accumulate", saved->text("train.accumulate"), point->path);
    // The checkpoint's global batch, on any number of ranks (elastic): train.batch follows.
    const Config full = with_defaults(config);
    const int64_t batch = full.get<int64_t>("train.batch");
    const int64_t per_rank =
        ckpt::resume_batch(*point, rt.size(), train::TrainerSettings::from_config(config).accumulate, batch);
    if (per_rank != batch) {
      config.set("train.batch", std::to_string(per_rank));
      if (rt.rank() == 0)
        spdlog::info("resume: {} ranks -> {}: train.batch {} per rank keeps the global batch {}", point->world_size,
                     rt.size(), per_rank, point->global_batch);
    }
    start = {point->epoch, point->position};
  }
  const std::string decided = describe_data(config, DataSettings::from_config(config).train, rt.size());
  if (rt.rank() == 0 && !decided.empty()) spdlog::info("{}", decided);
  if (saved)
    for (const auto& d : ckpt::compare_configs(*saved, config, point->path))
      if (rt.rank() == 0) spdlog::info("resume: config differs from the checkpoint's: {}", d);
  auto settings = train::TrainerSettings::from_config(config);
  train::seed(settings.seed);
  auto task = make_task(rt, config, DataSettings::from_config(config).train, start);
  settings = train::resolve_length(settings, task->batches_per_epoch(), config);
  if (rt.rank() == 0 && settings.epochs > 0)
    spdlog::info("train.epochs {} x {} global batches per epoch / train.accumulate {}: {} steps (train.steps not used)",
                 settings.epochs, task->batches_per_epoch(), settings.accumulate, settings.steps);
  if (rt.rank() == 0 && settings.warmup_ratio > 0)
    spdlog::info("optim.warmup_ratio {} of {} steps: {} steps of warmup (optim.warmup not used)", settings.warmup_ratio,
                 settings.steps, settings.warmup);
  train::Trainer trainer(rt, *task, settings, {config, run_dir, straggler, trace_path});
  if (point) ckpt::restore(rt, trainer, *point);
  ckpt::Checkpointer checkpointer(rt, trainer, config, ckpt_settings);
  return trainer.run();
}

double matmul_rate(const comm::Runtime& rt) {
  const auto options = at::TensorOptions().device(rt.device()).dtype(at::kFloat);
  const auto a = at::randn({1024, 1024}, options), b = at::randn({1024, 1024}, options);
  at::Tensor c = at::matmul(a, b);
  const int iters = 10;
  rt.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) c = at::matmul(a, b);
  c.sum().item<double>();  // waits on CUDA
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 2.0 * 1024 * 1024 * 1024 * iters / s;
}

}  // namespace meridian::tasks
