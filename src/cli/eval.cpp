// `meridian eval`: evaluates a checkpoint on a dataset, every rank its share: SigLIP (retrieval
// recall@K both ways and zero-shot accuracy) or detect (COCO-style mAP@0.5 and @0.5:0.95, per class).
#include <cstdio>

#include "commands.h"
#include "meridian/ckpt/checkpoint.h"
#include "meridian/ckpt/file.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/tasks/registry.h"

namespace meridian::cli {

Command eval_command() {
  Command c;
  c.name = "eval";
  c.summary = "Evaluate a checkpoint on a dataset: retrieval recall@K and zero-shot accuracy (siglip), mAP (detect)";
  c.add_options = [](cxxopts::Options& o) {
    // clang-format off
    o.add_options()
        ("checkpoint", "Checkpoint file (<run>/checkpoints/step_*.h5)", cxxopts::value<std::string>()->default_value(""))
        ("data", "Dataset (.h5): image-text made with the training data's tokenizer (prep --tokenizer TRAIN.h5), or detection", cxxopts::value<std::string>()->default_value(""))
        ("task", "The checkpoint's task must be this one (siglip, detect); default: whatever it is", cxxopts::value<std::string>()->default_value(""))
        ("set", "Override a value of the checkpoint's config (e.g. task.prompts)", cxxopts::value<std::vector<std::string>>());
    // clang-format on
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    const std::string path = p["checkpoint"].as<std::string>(), data_path = p["data"].as<std::string>();
    if (path.empty()) throw UserError("eval: --checkpoint is required");
    if (data_path.empty()) throw UserError("eval: --data is required");
    const ckpt::Reader reader(path);
    Config config = ckpt::saved_config(reader);
    const int64_t step = reader.int_attribute("step").value_or(0);
    apply_overrides(p, config);
    const std::string task = tasks::task_name(config), wanted = p["task"].as<std::string>();
    if (!wanted.empty() && wanted != task)
      throw UserError(path + ": --task " + wanted + ", but this checkpoint was trained with task.name " + task);
    const auto result = tasks::evaluate_checkpoint(rt, reader, config, data_path);
    if (rt.rank() == 0) {
      std::printf("eval %s (step %lld) on %s: %s\n%s", path.c_str(), (long long)step, data_path.c_str(),
                  result.counts.c_str(), result.details.c_str());
      std::printf("eval: %s\n", metrics_text(result.metrics).c_str());
    }
    return 0;
  };
  return c;
}

}  // namespace meridian::cli
