// `meridian export`: a checkpoint as the library it came from loads it. siglip: a transformers
// SiglipModel directory (tasks::export_siglip); lm: a LlamaForCausalLM directory
// (tasks::export_hf_llama), or the weights alone as one .safetensors file (tasks::export_merged);
// LoRA adapters merged; detect: an Ultralytics state_dict and its model YAML (tasks::export_ultralytics).
#include <spdlog/spdlog.h>

#include "commands.h"
#include "meridian/ckpt/checkpoint.h"
#include "meridian/ckpt/file.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/core/units.h"
#include "meridian/tasks/detect_ultralytics.h"
#include "meridian/tasks/lm_hf.h"
#include "meridian/tasks/lm_task.h"
#include "meridian/tasks/registry.h"
#include "meridian/tasks/siglip_hf.h"

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
    const auto path = p["checkpoint"].as<std::string>(), out = p["out"].as<std::string>();
    const std::string task = tasks::task_name(ckpt::saved_config(ckpt::Reader(path)));
    const double shard_mb = p["max-shard-mb"].as<double>();
    if (shard_mb < 0) throw UserError("export: --max-shard-mb must be positive");
    const int64_t shard_bytes = shard_mb > 0 ? int64_t(shard_mb * (1 << 20))
                                             : int64_t(parse_bytes(p["shard-size"].as<std::string>(), "--shard-size"));
    const std::string dtype = p["dtype"].as<std::string>(), tokenizer = p["tokenizer"].as<std::string>();
    if (task == "siglip") {
      const auto s = tasks::export_siglip(path, out, dtype, shard_bytes, tokenizer);
      spdlog::info(
          "export: {} tensors, {:.1f} MiB {} in {} weight file(s), tokenizer from {}: {} (transformers: "
          "SiglipModel.from_pretrained(\"{}\"))",
          s.tensors, double(s.bytes) / (1 << 20), p["dtype"].as<std::string>(), s.files, s.tokenizer, out, out);
      return 0;
    }
    if (task == "detect") {
      const auto s = tasks::export_ultralytics(path, out, dtype);
      spdlog::info(
          "export: {} tensors, {:.1f} MiB {}: {}/model.safetensors and the model YAML (Ultralytics: "
          "docs/running.md)",
          s.tensors, double(s.bytes) / (1 << 20), dtype, out);
      return 0;
    }
    if (task != "lm")
      throw UserError(path + ": export supports siglip, lm and detect checkpoints (this one is " + task + ")");
    if (out.size() > 12 && out.compare(out.size() - 12, 12, ".safetensors") == 0) {
      const int64_t n = tasks::export_merged(path, out);
      spdlog::info("export: wrote {} tensors to {} (adapters merged, Hugging Face names)", n, out);
      return 0;
    }
    const auto s = tasks::export_hf_llama(path, out, dtype, shard_bytes, tokenizer);
    spdlog::info(
        "export: {} tensors, {:.1f} MiB {} in {} weight file(s), tokenizer from {}: {} "
        "(transformers: AutoModelForCausalLM.from_pretrained(\"{}\"))",
        s.tensors, double(s.bytes) / (1 << 20), dtype, s.files, s.tokenizer, out, out);
    return 0;
  };
  return c;
}

}  // namespace meridian::cli
