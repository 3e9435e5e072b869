// `meridian eval`: evaluates a checkpoint on a dataset, every rank its share: SigLIP (retrieval
// recall@K both ways and zero-shot accuracy) or detect (COCO-style mAP@0.5 and @0.5:0.95, per class).
#include <algorithm>
#include <cstdio>

#include "commands.h"
#include "meridian/ckpt/checkpoint.h"
#include "meridian/ckpt/file.h"
#include "meridian/comm/communicator.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/data/format.h"
#include "meridian/tasks/detect_task.h"
#include "meridian/tasks/siglip_task.h"

namespace meridian::cli {

namespace {

int eval_detect(comm::Runtime& rt, const Config& config, const std::string& path, const std::string& data_path, int64_t step) {
  models::Yolo model(models::YoloConfig::from_config(config));
  ckpt::load_module(path, *model);
  model->to(rt.device());
  const auto result = tasks::evaluate_detection(rt, model, data_path, tasks::DetectEvalOptions::from_config(config));
  if (rt.rank() == 0) {
    std::printf("eval %s (step %lld) on %s: %lld images, %lld boxes, %lld detections\n%s", path.c_str(), (long long)step,
                data_path.c_str(), (long long)result.images, (long long)result.boxes, (long long)result.detections,
                result.per_class().c_str());
    std::printf("eval: map50 %.2f  map50_95 %.2f\n", 100 * std::max(0.0, result.map.map50), 100 * std::max(0.0, result.map.map50_95));
  }
  return 0;
}

}  // namespace

Command eval_command() {
  Command c;
  c.name = "eval";
  c.summary = "Evaluate a checkpoint on a dataset: retrieval recall@K and zero-shot accuracy (siglip), mAP (detect)";
  c.add_options = [](cxxopts::Options& o) {
    o.add_options()
        ("checkpoint", "Checkpoint file (<run>/checkpoints/step_*.h5)", cxxopts::value<std::string>()->default_value(""))
        ("data", "Dataset (.h5): image-text made with the training data's tokenizer (prep --tokenizer TRAIN.h5), or detection", cxxopts::value<std::string>()->default_value(""))
        ("task", "The checkpoint's task must be this one (siglip, detect); default: whatever it is", cxxopts::value<std::string>()->default_value(""))
        ("set", "Override a value of the checkpoint's config (e.g. task.prompts)", cxxopts::value<std::vector<std::string>>());
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    const std::string path = p["checkpoint"].as<std::string>(), data_path = p["data"].as<std::string>();
    if (path.empty()) throw UserError("eval: --checkpoint is required");
    if (data_path.empty()) throw UserError("eval: --data is required");
    const ckpt::Reader reader(path);
    Config config = ckpt::saved_config(reader);
    const int64_t step = reader.int_attribute("step").value_or(0);
    apply_overrides(p, config);
    const std::string task = config.get<std::string>("task.name", "siglip"), wanted = p["task"].as<std::string>();
    if (!wanted.empty() && wanted != task)
      throw UserError(path + ": --task " + wanted + ", but this checkpoint was trained with task.name " + task);
    if (task == "detect") return eval_detect(rt, config, path, data_path, step);
    if (task != "siglip") throw UserError(path + ": eval supports the siglip and detect tasks (this checkpoint is " + task + ")");
    const int64_t vocab = reader.shape("model/token_embed.weight").at(0);  // raised to the tokenizer's in training
    const data::DatasetInfo info = data::validate_dataset(data_path);
    auto mc = models::SiglipConfig::from_config(config);
    mc.vocab_size = vocab;
    mc.pad_id = info.pad_id;
    models::Siglip model(mc);
    ckpt::load_module(path, *model);
    model->to(rt.device());
    auto comm = comm::make_communicator(rt, comm::default_backend(rt));
    const auto result = tasks::evaluate_siglip(rt, *comm, model, data_path,
                                               config.get<std::vector<std::string>>("task.prompts", tasks::default_prompts()));
    if (rt.rank() == 0) {
      std::printf("eval %s (step %lld) on %s: %lld images, %lld captions\n", path.c_str(), (long long)step, data_path.c_str(),
                  (long long)result.images, (long long)result.captions);
      std::string line;
      for (const auto& [name, value] : result.metrics()) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%s%s %.2f", line.empty() ? "" : "  ", name.c_str(), value);
        line += buf;
      }
      std::printf("eval: %s\n", line.c_str());
    }
    return 0;
  };
  return c;
}

}  // namespace meridian::cli
