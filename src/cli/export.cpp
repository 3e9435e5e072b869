// `meridian export`: a checkpoint as the library it came from loads it, by its task's
// TaskSpec::export_checkpoint. siglip: a transformers SiglipModel directory; lm: a LlamaForCausalLM
// directory, or the weights alone as one .safetensors file, LoRA adapters merged; detect: an
// Ultralytics state_dict and its model YAML.
#include <spdlog/spdlog.h>

#include "commands.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/core/units.h"
#include "meridian/tasks/registry.h"

namespace meridian::cli {

Command export_command() {
  Command c;
  c.name = "export";
  c.summary =
      "Write a checkpoint as its library loads it: a SiglipModel (siglip) or LlamaForCausalLM (lm) directory, an "
      "Ultralytics state_dict and model YAML (detect)";
  c.add_options = [](cxxopts::Options& o) {
    // clang-format off
    o.add_options()
        ("checkpoint", "Checkpoint of a siglip, lm or detect run (step_*.h5)", cxxopts::value<std::string>())
        ("out", "The directory to write (must not exist); lm: a name ending in .safetensors writes the weights alone", cxxopts::value<std::string>())
        ("dtype", "Weights in f32 or bf16", cxxopts::value<std::string>()->default_value("f32"))
        ("shard-size", "Weight files of at most this size (model-0000k-of-0000N.safetensors with an index when more than one), e.g. 5GB or 2G", cxxopts::value<std::string>()->default_value("5GB"))
        ("max-shard-mb", "The same in MiB (overrides --shard-size)", cxxopts::value<double>()->default_value("0"))
        ("tokenizer", "Where the tokenizer comes from: a Hugging Face directory or the training dataset; default: the run's task.init, else its data.train", cxxopts::value<std::string>()->default_value(""));
    // clang-format on
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    if (!p.count("checkpoint") || !p.count("out")) throw UserError("export: give --checkpoint and --out");
    if (rt.rank() != 0) return 0;
    const auto path = p["checkpoint"].as<std::string>();
    const auto export_checkpoint =
        tasks::need(tasks::checkpoint_task(path), &tasks::TaskSpec::export_checkpoint, "export", path);
    const double shard_mb = p["max-shard-mb"].as<double>();
    if (shard_mb < 0) throw UserError("export: --max-shard-mb must be positive");
    tasks::ExportOptions o;
    o.out = p["out"].as<std::string>();
    o.dtype = p["dtype"].as<std::string>();
    o.max_shard_bytes = shard_mb > 0 ? int64_t(shard_mb * (1 << 20))
                                     : int64_t(parse_bytes(p["shard-size"].as<std::string>(), "--shard-size"));
    o.tokenizer = p["tokenizer"].as<std::string>();
    spdlog::info("{}", export_checkpoint(path, o));
    return 0;
  };
  return c;
}

}  // namespace meridian::cli
