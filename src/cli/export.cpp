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
    add_model_option(o, "The checkpoint to export (published models are read as they are)");
    // clang-format off
    o.add_options()
        ("out", "The directory to write (must not exist); lm: a name ending in .safetensors writes the weights alone", cxxopts::value<std::string>())
        ("dtype", "Weights in f32 or bf16", cxxopts::value<std::string>()->default_value("f32"))
        ("shard-size", "Weight files of at most this size (model-0000k-of-0000N.safetensors with an index when more than one), e.g. 5GB or 2G", cxxopts::value<std::string>()->default_value("5GB"))
        ("max-shard-mb", "The same in MiB (overrides --shard-size)", cxxopts::value<double>()->default_value("0"))
        ("tokenizer", "Where the tokenizer comes from: a Hugging Face directory or the training dataset; default: the run's task.init, else its data.train", cxxopts::value<std::string>()->default_value(""));
    // clang-format on
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    if (!p.count("out")) throw UserError("export: give --model (a checkpoint) and --out");
    if (rt.rank() != 0) return 0;
    const auto model = open_model_option(p, rt, "export");
    const std::string& path = model.path;
    if (model.published)
      throw UserError("export: " + model.what +
                      " is already in its library's format; export writes checkpoints (eval, predict, generate, embed "
                      "and train --init read it as it is)");
    const auto export_checkpoint = tasks::need(*model.spec, &tasks::TaskSpec::export_checkpoint, "export", path);
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
