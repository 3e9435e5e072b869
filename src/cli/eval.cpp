// `meridian eval`: evaluates a model (a checkpoint or published weights: tasks::open_model) on a
// dataset with its task's evaluation (TaskSpec::evaluate), every rank its share: SigLIP (retrieval
// recall@K both ways and mR, zero-shot accuracy), detect (COCO-style mAP@0.5 and @0.5:0.95, per
// class) or lm (loss, perplexity, tokens).
#include <cstdio>

#include "commands.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/core/json_file.h"
#include "meridian/nn/autocast.h"
#include "meridian/tasks/registry.h"

namespace meridian::cli {

Command eval_command() {
  Command c;
  c.name = "eval";
  c.summary =
      "Evaluate a model (checkpoint or published) on a dataset: retrieval recall@K, mR and zero-shot accuracy "
      "(siglip), COCO mAP (detect), loss and perplexity (lm)";
  c.add_options = [](cxxopts::Options& o) {
    add_model_option(o, "The model to evaluate");
    // clang-format off
    o.add_options()
        ("init", "The same as --model (a published model)", cxxopts::value<std::string>()->default_value(""))
        ("data", "Dataset (.h5): image-text made with the model's tokenizer (prep --tokenizer), detection, or text", cxxopts::value<std::string>()->default_value(""))
        ("seq-len", "lm: tokens per evaluated window; default: the run's data.seq_len (checkpoint) or the model's max_position_embeddings (published)", cxxopts::value<int64_t>()->default_value("0"))
        ("json", "Also write the metrics to this JSON file (full precision; rank 0)", cxxopts::value<std::string>()->default_value(""))
        ("save-json", "detect: also write every detection as COCO results JSON, in the original images' pixels (pycocotools scores it against the instances file)", cxxopts::value<std::string>()->default_value(""))
        ("task", "The model's task must be this one (siglip, detect, lm); default: whatever it is", cxxopts::value<std::string>()->default_value(""))
        ("set", "Override a value of the model's config (e.g. task.prompts)", cxxopts::value<std::vector<std::string>>());
    // clang-format on
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    const std::string data_path = p["data"].as<std::string>();
    if (data_path.empty()) throw UserError("eval: --data is required");
    const std::string save = p["save-json"].as<std::string>();
    const auto model = open_model_option(p, rt, "eval", [&](Config& config) {
      if (p["seq-len"].as<int64_t>() > 0)
        config.set("data.seq_len", std::to_string(p["seq-len"].as<int64_t>()), "--seq-len");
      if (save.empty()) return;
      const std::string task = tasks::task_name(config);
      if (!tasks::config_schema(task).find("task.save_json"))
        throw UserError("eval: --save-json writes detections; task " + task + " has none (task.save_json)");
      config.set("task.save_json", yaml_quoted(save), "--save-json");
    });
    const nn::AutocastScope precision(rt.device().type(), model.autocast_dtype(rt.device()));
    tasks::require_model_task(model, p["task"].as<std::string>(), "eval");
    const auto evaluate = tasks::need(*model.spec, &tasks::TaskSpec::evaluate, "eval", model.path);
    const tasks::CheckpointEval result = evaluate(rt, model, data_path);
    if (rt.rank() != 0) return 0;  // rank 0 prints the result (and writes --json)
    const std::string what = model.published ? model.path : model.path + " (step " + std::to_string(model.step) + ")";
    std::printf("eval %s on %s: %s\n%s", what.c_str(), data_path.c_str(), result.counts.c_str(),
                result.details.c_str());
    std::printf("eval: %s\n", metrics_text(result.metrics).c_str());
    if (const std::string json = p["json"].as<std::string>(); !json.empty()) {
      nlohmann::json metrics = nlohmann::json::object();
      for (const auto& [name, value] : result.metrics) metrics[name] = value;
      write_json_file(json, {{"model", what}, {"data", data_path}, {"counts", result.counts}, {"metrics", metrics}});
    }
    return 0;
  };
  return c;
}

}  // namespace meridian::cli
