// `meridian train`, `meridian bench train` and `meridian config`: options, the config from the file
// and --data/--set, and the report; the run itself is tasks::run_training.
#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "commands.h"
#include "meridian/ckpt/checkpoint.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/tasks/registry.h"
#include "meridian/tasks/run.h"
#include "meridian/train/trainer.h"

namespace meridian::cli {

namespace {

void add_config_options(cxxopts::Options& o) {
  // clang-format off
  o.add_options()
      ("config", "YAML with model:, task:, data:, train: and optim: sections (jobs/configs/*.yaml)", cxxopts::value<std::string>()->default_value(""))
      ("data", "Training dataset (.h5, from meridian prep); overrides data.train", cxxopts::value<std::string>()->default_value(""))
      ("init", "Start from published weights: a Hugging Face model directory (config.json and safetensors; tasks siglip and lm) or a .safetensors file; sets task.init", cxxopts::value<std::string>()->default_value(""))
      ("set", "Override a config value, key=value (repeatable), e.g. --set optim.lr=3e-4", cxxopts::value<std::vector<std::string>>())
      ("health-every", "Steps between health reports (health.jsonl; stragglers, memory growth, data stalls); 0: off; default train.health_every or 100", cxxopts::value<int64_t>())
      ("resume", "auto (the newest valid checkpoint in the run's checkpoint directory, else from scratch) or a checkpoint file", cxxopts::value<std::string>()->default_value(""))
      ("print-config", "Print the resolved config and exit: every key, defaults filled in, each with where its value came from (the file and line, --set, --data, --init's config.json, the resume point, the task's policy when --data is given, or default); docs/config.md lists every key");
  // clang-format on
}

// The config file with --data and every --set applied (in order), checked against the schema
// (tasks::validate_config), as the run will use it. Not collective.
Config resolved_config(const cxxopts::ParseResult& p, const std::string& command) {
  const std::string path = p["config"].as<std::string>();
  if (path.empty()) throw UserError(command + ": --config is required (e.g. jobs/configs/siglip-tiny.yaml)");
  Config config = Config::load_file(path);
  if (!p["data"].as<std::string>().empty())
    config.set("data.train", yaml_quoted(p["data"].as<std::string>()), "--data");
  apply_overrides(p, config);
  if (!p["init"].as<std::string>().empty()) config.set("task.init", yaml_quoted(p["init"].as<std::string>()), "--init");
  tasks::apply_init_config(config);
  if (p.count("health-every"))
    config.set("train.health_every", std::to_string(p["health-every"].as<int64_t>()), "--health-every");
  tasks::validate_config(config);
  if (!p.count("print-config") && tasks::DataSettings::from_config(config).train.empty())
    throw UserError(command + ": no training data: give --data or data.train in " + path);
  return config;
}

// --print-config, on rank 0: the config resolved as the run would (tasks::resolve_run: the resume
// point and the task's policy, which reads the training data, when there is some), each value with
// its source. Collective. Returns the exit code.
int print_config(const comm::Runtime& rt, const cxxopts::ParseResult& p, Config config) {
  if (!tasks::DataSettings::from_config(config).train.empty())
    config =
        tasks::resolve_run(rt, std::move(config), p["run-dir"].as<std::string>(), p["resume"].as<std::string>()).config;
  if (rt.rank() == 0) std::printf("%s", tasks::annotated_config(config).c_str());
  return 0;
}

// --inject-straggler RANK:data|compute:MS (a test hook, not in --help).
train::InjectedStraggler parse_straggler(const std::string& text, const comm::Runtime& rt) {
  train::InjectedStraggler s;
  if (text.empty()) return s;
  const auto a = text.find(':'), b = text.rfind(':');
  char* end = nullptr;
  const long rank = std::strtol(text.c_str(), &end, 10);
  const double ms = b == std::string::npos ? 0 : std::strtod(text.c_str() + b + 1, nullptr);
  const std::string kind = a == std::string::npos || b <= a ? "" : text.substr(a + 1, b - a - 1);
  if (end != text.c_str() + a || rank < 0 || rank >= rt.size() || ms <= 0 || (kind != "data" && kind != "compute"))
    throw UserError("--inject-straggler: expected RANK:data|compute:MILLISECONDS with RANK < " +
                    std::to_string(rt.size()) + ", got '" + text + "'");
  s.rank = int(rank);
  (kind == "data" ? s.data_s : s.compute_s) = ms / 1e3;
  return s;
}

// runs/<date>-<time> chosen by rank 0 (every rank must use the same directory).
std::string default_run_dir(const comm::Runtime& rt) {
  char name[64] = {0};
  if (rt.rank() == 0) {
    const std::time_t now = std::time(nullptr);
    std::strftime(name, sizeof name, "runs/%Y%m%d-%H%M%S", std::localtime(&now));
  }
  rt.broadcast_bytes(name, sizeof name, 0);
  return name;
}

}  // namespace

void apply_overrides(const cxxopts::ParseResult& p, Config& config) {
  if (p.count("set")) tasks::apply_overrides(config, p["set"].as<std::vector<std::string>>());
}

std::string metrics_text(const std::vector<std::pair<std::string, double>>& m) {
  std::string s;
  for (const auto& [name, value] : m) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s%s %.2f", s.empty() ? "" : "  ", name.c_str(), value);
    s += buf;
  }
  return s;
}

Command train_command() {
  Command c;
  c.name = "train";
  c.summary = "Train a model data-parallel from a YAML config (run under mpirun or srun)";
  c.add_options = [](cxxopts::Options& o) {
    add_config_options(o);
    // Not in --help: a test hook that makes one rank an input or a compute straggler.
    // clang-format off
    o.add_options("testing")
        ("inject-straggler", "RANK:data|compute:MS: that rank waits MS more for every batch, or computes MS longer in every forward", cxxopts::value<std::string>()->default_value(""));
    // clang-format on
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    const Config config = resolved_config(p, "train");
    if (p.count("print-config")) return print_config(rt, p, config);
    std::string run_dir = p["run-dir"].as<std::string>();
    if (run_dir.empty()) run_dir = default_run_dir(rt);
    tasks::require_same_run(rt, config, run_dir, p["resume"].as<std::string>());
    const auto r = tasks::run_training(rt, config, run_dir, p["resume"].as<std::string>(),
                                       parse_straggler(p["inject-straggler"].as<std::string>(), rt));
    if (r.signalled) return kExitStopped;
    if (rt.rank() == 0 && !r.losses.empty()) {
      std::printf(
          "train: %s%zu steps, loss %.4f -> %.4f, %.1f samples/s over %d ranks, %lld bad steps%s, %.2fM parameters, "
          "run directory %s\n",
          r.stopped ? "stopped after " : "", r.losses.size(), r.losses.front(), r.losses.back(), r.samples_per_s,
          rt.size(), (long long)r.bad_steps,
          r.scale_skips < 0 ? "" : fmt::format(", {} skipped by the loss scale", r.scale_skips).c_str(),
          r.parameters / 1e6, run_dir.c_str());
      if (!r.first_eval.empty()) std::printf("eval before: %s\n", metrics_text(r.first_eval).c_str());
      if (!r.last_eval.empty()) std::printf("eval after: %s\n", metrics_text(r.last_eval).c_str());
    }
    if (rt.rank() == 0 && !std::isnan(r.best.value))
      std::printf("best: %s %.4f at step %lld -> %s/best.h5%s%s\n", config.get<std::string>("checkpoint.best").c_str(),
                  r.best.value, (long long)r.best.step,
                  ckpt::CheckpointSettings::from_config(config, run_dir).dir.c_str(), r.early_stop.empty() ? "" : "; ",
                  r.early_stop.c_str());
    return 0;
  };
  return c;
}

Command bench_train_command() {
  Command c;
  c.name = "bench train";
  c.summary = "Training speed: samples/s, step-time breakdown, model FLOP/s and MFU";
  c.add_options = [](cxxopts::Options& o) {
    add_config_options(o);
    o.add_options("bench train")("trace",
                                 "Write a Chrome trace (chrome://tracing, Perfetto) of every rank's steps to this file",
                                 cxxopts::value<std::string>()->default_value(""))(
        "count-syncs",
        "GPU ranks: count the host's waits for the GPU in each step (LibTorch's CUDA sync debug mode) and print them");
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    Config config = resolved_config(p, "bench train");
    if (p.count("print-config")) return print_config(rt, p, config);
    tasks::require_same_run(rt, config, p["run-dir"].as<std::string>(), "");
    config.set("data.eval", "''");             // speed only
    config.set("checkpoint.at_end", "false");  // speed only: no checkpoints
    config.set("checkpoint.every_steps", "0");
    config.set("checkpoint.every_minutes", "0");
    const bool count_syncs = p.count("count-syncs") > 0;
    const auto r = tasks::run_training(rt, config, p["run-dir"].as<std::string>(), "", {}, p["trace"].as<std::string>(),
                                       count_syncs);
    if (rt.rank() == 0) {
      const auto& m = r.mean_times;
      auto pct = [&](double v) { return 100.0 * v / m.total; };
      std::printf(
          "bench train: %d ranks, %.1f samples/s (%.1f per rank), step %.1f ms: data %.1f (%.0f%%), forward %.1f "
          "(%.0f%%), backward %.1f (%.0f%%), exposed comm %.1f (%.0f%%), optimizer %.1f (%.0f%%)\n",
          rt.size(), r.samples_per_s, r.samples_per_s / rt.size(), 1e3 * m.total, 1e3 * m.data, pct(m.data),
          1e3 * m.forward, pct(m.forward), 1e3 * m.backward, pct(m.backward), 1e3 * m.comm, pct(m.comm),
          1e3 * m.optimizer, pct(m.optimizer));
      std::printf(
          "bench train: slowest rank step %.1f ms; model %.2f GFLOP/s (3 x forward FLOPs x samples/s): MFU %.1f%% of "
          "%.2f GFLOP/s per rank (the log names that peak)\n",
          1e3 * r.max_times.total, r.model_flops_per_s / 1e9, 100.0 * r.model_flops_per_s / (r.peak_flops * rt.size()),
          r.peak_flops / 1e9);
      if (r.share_changes >= 0) {
        const double steps = double(std::max<int64_t>(1, int64_t(r.losses.size())));
        std::printf(
            "bench train: train.balance auto: %lld share change(s) in %zu steps (%.1f per 100); the longest stretch "
            "at one set of shares: steps %lld-%lld, %.1f samples/s (the whole run: %.1f)\n",
            static_cast<long long>(r.share_changes), r.losses.size(), 100.0 * double(r.share_changes) / steps,
            static_cast<long long>(r.settled_first), static_cast<long long>(r.settled_last), r.settled_samples_per_s,
            r.samples_per_s);
      }
      if (count_syncs && r.host_syncs_per_step >= 0)
        std::printf(
            "bench train: host synchronisations per step %.2f (at most %lld in one step; steps after the first, max "
            "over ranks; LibTorch's CUDA sync debug mode)\n",
            r.host_syncs_per_step, static_cast<long long>(r.host_syncs_max));
      else if (count_syncs)
        std::printf("bench train: host synchronisations not counted: the ranks run on the CPU\n");
    }
    return 0;
  };
  return c;
}

Command config_command() {
  Command c;
  c.name = "config";
  c.summary = "Every config key: type, default, range, meaning (Markdown; docs/config.md is this output)";
  c.add_options = [](cxxopts::Options&) {};
  c.run = [](const cxxopts::ParseResult&, comm::Runtime& rt) {
    if (rt.rank() == 0) std::printf("%s", tasks::config_reference().c_str());
    return 0;
  };
  return c;
}

}  // namespace meridian::cli
