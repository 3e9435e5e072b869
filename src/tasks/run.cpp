#include "meridian/tasks/run.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "meridian/ckpt/checkpoint.h"
#include "meridian/comm/probe.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/clock.h"
#include "meridian/core/error.h"
#include "meridian/ops/facts.h"
#include "meridian/ops/peak.h"
#include "meridian/report/report.h"
#include "meridian/tasks/registry.h"
#include "meridian/train/settings.h"
#include "meridian/train/strategy_plan.h"

namespace meridian::tasks {

void require_same_run(const comm::Runtime& rt, const Config& config, const std::string& run_dir,
                      const std::string& resume) {
  const Config full = with_defaults(config);
  std::vector<std::pair<std::string, std::string>> settings{{"--run-dir", run_dir}, {"--resume", resume}};
  for (const auto& key : full.leaf_keys()) settings.emplace_back(key, full.text(key));
  comm::require_same_on_every_rank(rt, "the training config", settings);
}

namespace {
// checkpoint.best names a metric the task's evaluation reports, and train.patience has it. Without
// data.eval there is nothing to judge: both are off, and the returned note says so ("" otherwise).
std::string check_best(const Config& config, ckpt::CheckpointSettings& c, train::TrainerSettings& t) {
  if (t.patience > 0 && c.best.empty())
    throw ConfigError(config.source("train.patience"), "train.patience",
                      "counts evaluations without a better checkpoint.best metric: set checkpoint.best too");
  if (c.best.empty()) return "";
  const TaskSpec& spec = task_spec(config);
  if (std::find(spec.metrics.begin(), spec.metrics.end(), c.best) == spec.metrics.end()) {
    std::string names;
    for (const auto& m : spec.metrics) names += (names.empty() ? "" : ", ") + m;
    throw ConfigError(config.source("checkpoint.best"), "checkpoint.best",
                      "is '" + c.best + "'; task " + spec.name + "'s evaluation reports " + names);
  }
  if (!DataSettings::from_config(config).eval.empty()) return "";
  const std::string note = "checkpoint.best " + c.best + (t.patience > 0 ? " and train.patience" : "") +
                           ": no data.eval to evaluate on, so no best.h5" +
                           (t.patience > 0 ? " and no early stop" : "") + " (give --set data.eval=VAL.h5)";
  c.best.clear();
  t.patience = 0;
  return note;
}

// "cpu", or the GPU's name.
std::string device_text(const comm::Runtime& rt) {
  if (!rt.device().is_cuda()) return "cpu";
  const comm::GpuInventory gpus = comm::local_gpus();
  const int i = rt.device().index();
  return i >= 0 && i < int(gpus.gpus.size()) ? gpus.gpus[size_t(i)].name : rt.device().str();
}

// Collective (gathers every rank's host and device): the attempt's start record for attempts.jsonl,
// on rank 0 (null elsewhere).
nlohmann::json attempt_start(const comm::Runtime& rt, const ResolvedRun& run, train::Trainer& trainer,
                             const train::TrainerSettings& settings) {
  const auto hosts = rt.gather_to_root(rt.host());
  const auto devices = rt.gather_to_root(device_text(rt));
  if (rt.rank() != 0) return nullptr;
  const ops::VersionFacts v = ops::version_facts();
  nlohmann::json r = {
      {"event", "start"},
      {"time", unix_seconds()},
      {"step", trainer.step()},
      {"steps", settings.steps},
      {"world_size", rt.size()},
      {"nodes", rt.node_count()},
      {"hosts", hosts},
      {"devices", devices},
      {"versions",
       {{"meridian", v.build}, {"LibTorch", v.torch}, {"MPI", v.mpi}, {"NCCL", v.nccl}, {"CUDA", v.cuda_build}}},
      {"task", trainer.task().name()},
      {"global_batch", trainer.global_batch()},
      {"precision", train::precision_name(settings.precision)},
      {"data", DataSettings::from_config(run.config).train},
      {"resumed_from", nullptr}};
  if (run.resume) r["resumed_from"] = {{"path", run.resume->path}, {"step", run.resume->step}};
  if (!run.skipped.empty()) r["skipped_checkpoints"] = run.skipped;  // corrupt or unreadable: passed over
  return r;
}

// The attempt's end record for attempts.jsonl; `message` only when not empty.
nlohmann::json attempt_end(int64_t step, const std::string& status, const std::string& message) {
  nlohmann::json r = {{"event", "end"}, {"time", unix_seconds()}, {"step", step}, {"status", status}};
  if (!message.empty()) r["message"] = message;
  return r;
}

// ... of a run that returned: how it ended, and the best evaluation of `metric` (checkpoint.best).
nlohmann::json attempt_end(const train::TrainSummary& summary, int64_t step, const std::string& metric) {
  nlohmann::json r = attempt_end(step,
                                 summary.signalled             ? "signalled"
                                 : summary.stopped             ? "stopped"
                                 : !summary.early_stop.empty() ? "early stop"
                                                               : "finished",
                                 summary.early_stop);
  if (!metric.empty() && std::isfinite(summary.best.value))
    r["best"] = {{"metric", metric}, {"value", summary.best.value}, {"step", summary.best.step}};
  return r;
}
// train.precision auto: each rank's device decides (ops::choose_precision), and the job takes the
// one every rank can run (bf16 > fp16 > float32: the lowest), set in `config` with its reason as the
// source (the checkpoint's config then says what the run trained in). Collective; the note for rank 0's
// log, or "" when the precision was given.
std::string resolve_precision(const comm::Runtime& rt, Config& config) {
  if (with_defaults(config).get<std::string>("train.precision") != "auto") return "";
  const ops::PrecisionChoice mine = ops::choose_precision(rt.device());
  const std::vector<std::string> order = {"float32", "fp16", "bf16"};
  const auto level = int64_t(std::find(order.begin(), order.end(), mine.precision) - order.begin());
  const int64_t agreed = -rt.max(-level);
  const std::string chosen = order[size_t(agreed)];
  const std::string why =
      agreed == level ? mine.why : "the lowest of the ranks' devices (each rank's log names its own)";
  if (agreed != level)
    spdlog::info("rank {}: train.precision auto: {} here ({}), {} for the job", rt.rank(), mine.precision, mine.why,
                 chosen);
  config.set("train.precision", chosen, "train.precision auto: " + why);
  return "train.precision auto: " + chosen + " (" + why + ")";
}

}  // namespace

ResolvedRun resolve_run(const comm::Runtime& rt, Config config, const std::string& run_dir, const std::string& resume) {
  ResolvedRun r;
  // The checkpoint: keys first (the pass below changes none of them): where to look for the resume point.
  r.checkpoint = ckpt::CheckpointSettings::from_config(config, run_dir);
  r.resume = ckpt::choose_resume_point(rt, resume, r.checkpoint.dir, &r.skipped);
  std::optional<Config> saved;  // the checkpoint's config
  if (r.resume) {
    const ckpt::ResumePoint& point = *r.resume;
    saved = Config::parse(point.config_yaml, point.path);
    // A resumed run with optim.name auto decides for the checkpoint's global batch: its
    // train.accumulate and train.batch first.
    if (!config.has("train.accumulate") && saved->has("train.accumulate"))
      config.set("train.accumulate", saved->text("train.accumulate"), point.path);
    // The checkpoint's global batch, on any number of ranks (elastic): train.batch follows.
    const Config full = with_defaults(config);
    const int64_t batch = full.get<int64_t>("train.batch");
    const int64_t per_rank = ckpt::resume_batch(point, rt.size(), full.get<int64_t>("train.accumulate"), batch);
    if (per_rank != batch) {
      config.set("train.batch", std::to_string(per_rank), "the resume point (" + point.path + ")");
      r.notes.push_back(fmt::format("resume: {} ranks -> {}: train.batch {} per rank keeps the global batch {}",
                                    point.world_size, rt.size(), per_rank, point.global_batch));
    }
    r.start = {point.epoch, point.position};
  }
  const std::string decided = describe_data(config, DataSettings::from_config(config).train, rt.size());
  if (!decided.empty()) r.notes.push_back(decided);
  // auto before the comparison: a resumed auto run that decides as before differs in nothing.
  if (const std::string note = resolve_precision(rt, config); !note.empty()) r.notes.push_back(note);
  if (saved)
    for (const auto& d : ckpt::compare_configs(*saved, config, r.resume->path))
      r.notes.push_back("resume: config differs from the checkpoint's: " + d);
  r.trainer = train::TrainerSettings::from_config(config);
  if (const std::string note = check_best(config, r.checkpoint, r.trainer); !note.empty()) r.warnings.push_back(note);
  r.config = std::move(config);
  return r;
}

std::string annotated_config(const Config& config) {
  const Config full = with_defaults(config);  // a copy, which keeps no line numbers: sources come from `config`
  std::string out;
  std::vector<std::string> open;  // the maps the previous key was in
  for (const auto& key : full.leaf_keys()) {
    std::vector<std::string> parts;
    for (size_t b = 0, e; b <= key.size(); b = e + 1) {
      e = key.find('.', b);
      if (e == std::string::npos) e = key.size();
      parts.push_back(key.substr(b, e - b));
    }
    size_t common = 0;
    while (common < open.size() && common + 1 < parts.size() && open[common] == parts[common]) ++common;
    for (size_t d = common; d + 1 < parts.size(); ++d) out += std::string(2 * d, ' ') + parts[d] + ":\n";
    open.assign(parts.begin(), parts.end() - 1);
    const std::string from = config.has(key) ? config.source(key) : full.source(key);
    out += std::string(2 * (parts.size() - 1), ' ') + parts.back() + ": " + full.text(key) + "  # " + from + "\n";
  }
  return out;
}

train::TrainSummary run_training(const comm::Runtime& rt, Config config, const std::string& run_dir,
                                 const std::string& resume, const train::InjectedStraggler& straggler,
                                 const std::string& trace_path, bool count_syncs) {
  train::install_stop_signals();  // from the start: a signal while the data opens still ends with a checkpoint
  const ResolvedRun run = resolve_run(rt, std::move(config), run_dir, resume);
  if (rt.rank() == 0) {
    for (const auto& note : run.notes) spdlog::info("{}", note);
    for (const auto& warning : run.warnings) spdlog::warn("{}", warning);
  }
  if (run.trainer.precision == train::Precision::BFloat16) {  // every rank, before the data opens
    const std::string why = ops::bf16_unsupported(rt.device());
    const int64_t ranks = rt.sum(why.empty() ? 0 : 1);
    if (ranks > 0)
      throw ConfigError(
          run.config.source("train.precision"), "train.precision",
          "bf16 on a device without it: " +
              (why.empty() ? std::to_string(ranks) + " other rank(s)' GPUs (their logs name them); use fp16 on compute "
                                                     "capability 7.x (train.precision auto picks it), float32 below"
                           : why));
  }
  train::seed(run.trainer.seed);
  auto task =
      task_spec(run.config).make(rt, run.config, run.trainer, DataSettings::from_config(run.config).train, run.start);
  auto settings = train::resolve_length(run.trainer, task->batches_per_epoch(), run.config);
  const bool bf16 = settings.precision == train::Precision::BFloat16;
  std::optional<ops::Peak> peak;
  // fp16 on a CPU (a test's, no float16 units): against the float32 rate, the faster of the two there.
  const bool cpu_fp16 = settings.precision == train::Precision::Float16 && !rt.device().is_cuda();
  if (settings.peak_flops <= 0 || (bf16 && !rt.device().is_cuda()))
    peak = ops::device_peak(rt, cpu_fp16 ? at::kFloat : train::compute_dtype(settings.precision));
  if (settings.peak_flops <= 0) {  // MFU against the device's published or measured peak
    settings.peak_flops = peak->flops;
    if (rt.rank() == 0) spdlog::info("MFU against {:.1f} GFLOP/s per device ({})", peak->flops / 1e9, peak->source);
  } else if (rt.rank() == 0) {
    spdlog::info("MFU against train.peak_flops {:.1f} GFLOP/s per device", settings.peak_flops / 1e9);
  }
  if (bf16 && !rt.device().is_cuda()) {  // which path bf16 takes here, and a warning where it is the slow one
    const ops::Bf16Path path = ops::cpu_bf16_path(rt, peak->flops);
    if (rt.rank() == 0) path.fast ? spdlog::info("{}", path.text) : spdlog::warn("{}", path.text);
  }
  if (rt.rank() == 0 && settings.epochs > 0)
    spdlog::info("train.epochs {} x {} global batches per epoch / train.accumulate {}: {} steps (train.steps not used)",
                 settings.epochs, task->batches_per_epoch(), settings.accumulate, settings.steps);
  if (rt.rank() == 0 && settings.warmup_ratio > 0)
    spdlog::info("optim.warmup_ratio {} of {} steps: {} steps of warmup (optim.warmup not used)", settings.warmup_ratio,
                 settings.steps, settings.warmup);
  train::TrainerOptions options{run.config, run_dir, straggler, trace_path};
  options.best = {run.checkpoint.best, run.checkpoint.best_maximize()};
  options.count_syncs = count_syncs;
  train::Trainer trainer(rt, *task, settings, options);
  if (run.resume) ckpt::restore(rt, trainer, *run.resume);
  ckpt::Checkpointer checkpointer(rt, trainer, run.config, run.checkpoint);
  // Rank 0 records the attempt (attempts.jsonl) and keeps RUN_DIR/report.html up to date.
  const nlohmann::json start = run_dir.empty() ? nlohmann::json() : attempt_start(rt, run, trainer, settings);
  std::unique_ptr<report::PageWriter> page;
  // The attempt records are rank 0's alone: one it cannot write is a warning, never the end of a run.
  const auto record = [&](const nlohmann::json& r) {
    try {
      report::append_attempt(run_dir, r);
    } catch (const std::exception& e) {
      spdlog::warn("report: {}", e.what());
    }
  };
  if (rt.rank() == 0 && !run_dir.empty()) {
    record(start);
    if (settings.report) {
      page = std::make_unique<report::PageWriter>(run_dir);
      trainer.add_step_hook([&page](train::Trainer&, const train::StepEvent& e) {
        if (e.evaluated && !e.last && !e.stopping) page->request();  // the last one is written below
      });
    }
  }
  train::TrainSummary summary;
  try {
    summary = trainer.run();
  } catch (const std::exception& e) {
    if (rt.rank() == 0 && !run_dir.empty()) {
      record(attempt_end(trainer.step(), "failed", e.what()));
      if (page) page->finish();  // logs, never throws
    }
    throw;
  }
  if (rt.rank() == 0 && !run_dir.empty()) {
    record(attempt_end(summary, trainer.step(), run.checkpoint.best));
    if (page) {
      const std::string path = page->finish();
      if (!path.empty()) spdlog::info("report: {}", path);
    }
  }
  return summary;
}

}  // namespace meridian::tasks
