// `meridian eval`: evaluates a checkpoint on a dataset with its task's evaluation
// (TaskSpec::evaluate_checkpoint), every rank its share: SigLIP (retrieval recall@K both ways and
// zero-shot accuracy), detect (COCO-style mAP@0.5 and @0.5:0.95, per class) or lm (loss,
// perplexity, tokens); or a published Hugging Face directory as it is (--init:
// TaskSpec::evaluate_published of the task whose hf_model_type is its config.json's model_type).
#include <cstdio>

#include "commands.h"
#include "meridian/ckpt/checkpoint.h"
#include "meridian/ckpt/file.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/core/json_file.h"
#include "meridian/tasks/registry.h"

namespace meridian::cli {

Command eval_command() {
  Command c;
  c.name = "eval";
  c.summary =
      "Evaluate a checkpoint on a dataset: retrieval recall@K and zero-shot accuracy (siglip), mAP (detect), loss and "
      "perplexity (lm)";
  c.add_options = [](cxxopts::Options& o) {
    // clang-format off
    o.add_options()
        ("checkpoint", "Checkpoint file (<run>/checkpoints/step_*.h5)", cxxopts::value<std::string>()->default_value(""))
        ("init", "Instead of --checkpoint: a Hugging Face LlamaForCausalLM directory as published (task lm)", cxxopts::value<std::string>()->default_value(""))
        ("data", "Dataset (.h5): image-text made with the training data's tokenizer (prep --tokenizer TRAIN.h5), detection, or text", cxxopts::value<std::string>()->default_value(""))
        ("seq-len", "lm: tokens per evaluated window; default: the run's data.seq_len (--checkpoint) or the model's max_position_embeddings (--init)", cxxopts::value<int64_t>()->default_value("0"))
        ("json", "Also write the metrics to this JSON file (full precision; rank 0)", cxxopts::value<std::string>()->default_value(""))
        ("save-json", "detect: also write every detection as COCO results JSON, in the original images' pixels (pycocotools scores it against the instances file)", cxxopts::value<std::string>()->default_value(""))
        ("task", "The checkpoint's task must be this one (siglip, detect, lm); default: whatever it is", cxxopts::value<std::string>()->default_value(""))
        ("set", "Override a value of the checkpoint's config (e.g. task.prompts)", cxxopts::value<std::vector<std::string>>());
    // clang-format on
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    const std::string path = p["checkpoint"].as<std::string>(), data_path = p["data"].as<std::string>();
    const std::string init = p["init"].as<std::string>();
    if (path.empty() == init.empty()) throw UserError("eval: give --checkpoint or --init (one of them)");
    if (data_path.empty()) throw UserError("eval: --data is required");
    // Rank 0 prints the result (and writes --json).
    const auto report = [&](const std::string& what, const tasks::CheckpointEval& result) {
      if (rt.rank() != 0) return;
      std::printf("eval %s on %s: %s\n%s", what.c_str(), data_path.c_str(), result.counts.c_str(),
                  result.details.c_str());
      std::printf("eval: %s\n", metrics_text(result.metrics).c_str());
      if (const std::string json = p["json"].as<std::string>(); !json.empty()) {
        nlohmann::json metrics = nlohmann::json::object();
        for (const auto& [name, value] : result.metrics) metrics[name] = value;
        write_json_file(json, {{"model", what}, {"data", data_path}, {"counts", result.counts}, {"metrics", metrics}});
      }
    };
    if (!init.empty()) {
      Config overrides;
      if (p["seq-len"].as<int64_t>() > 0)
        overrides.set("data.seq_len", std::to_string(p["seq-len"].as<int64_t>()), "--seq-len");
      report(init, tasks::need(tasks::published_task(init), &tasks::TaskSpec::evaluate_published, "eval --init", init)(
                       rt, init, data_path, overrides));
      return 0;
    }
    const ckpt::Reader reader(path);
    Config config = ckpt::saved_config(reader);
    const int64_t step = reader.int_attribute("step").value_or(0);
    apply_overrides(p, config);
    if (p["seq-len"].as<int64_t>() > 0)
      config.set("data.seq_len", std::to_string(p["seq-len"].as<int64_t>()), "--seq-len");
    const tasks::TaskSpec& spec = tasks::task_spec(config);
    const std::string task = spec.name, wanted = p["task"].as<std::string>();
    if (!wanted.empty() && wanted != task)
      throw UserError(path + ": --task " + wanted + ", but this checkpoint was trained with task.name " + task);
    if (const std::string save = p["save-json"].as<std::string>(); !save.empty()) {
      if (!tasks::config_schema(task).find("task.save_json"))
        throw UserError("eval: --save-json writes detections; task " + task + " has none (task.save_json)");
      config.set("task.save_json", yaml_quoted(save), "--save-json");
    }
    const auto evaluate = tasks::need(spec, &tasks::TaskSpec::evaluate_checkpoint, "eval", path);
    report(path + " (step " + std::to_string(step) + ")", evaluate(rt, reader, config, data_path));
    return 0;
  };
  return c;
}

}  // namespace meridian::cli
