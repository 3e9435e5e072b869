// `meridian eval`: evaluates a checkpoint on a dataset (SigLIP: retrieval recall@K both ways and
// zero-shot accuracy), every rank embedding its share.
#include <cstdio>

#include "commands.h"
#include "meridian/ckpt/checkpoint.h"
#include "meridian/ckpt/file.h"
#include "meridian/comm/communicator.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/data/format.h"
#include "meridian/tasks/siglip_task.h"

namespace meridian::cli {

Command eval_command() {
  Command c;
  c.name = "eval";
  c.summary = "Evaluate a checkpoint on an image-text dataset: retrieval recall@1/5/10 and zero-shot accuracy";
  c.add_options = [](cxxopts::Options& o) {
    o.add_options()
        ("checkpoint", "Checkpoint file (<run>/checkpoints/step_*.h5)", cxxopts::value<std::string>()->default_value(""))
        ("data", "Image-text dataset (.h5) made with the training data's tokenizer (prep --tokenizer TRAIN.h5)", cxxopts::value<std::string>()->default_value(""))
        ("set", "Override a value of the checkpoint's config (e.g. task.prompts)", cxxopts::value<std::vector<std::string>>());
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    const std::string path = p["checkpoint"].as<std::string>(), data_path = p["data"].as<std::string>();
    if (path.empty()) throw UserError("eval: --checkpoint is required");
    if (data_path.empty()) throw UserError("eval: --data is required");
    Config config;
    int64_t step = 0, vocab = 0;
    {
      ckpt::Reader reader(path);
      config = Config::parse(reader.string_attribute("config").value_or(""), path + " (config)");
      step = reader.int_attribute("step").value_or(0);
      vocab = reader.shape("model/token_embed.weight").at(0);  // raised to the tokenizer's in training
    }
    apply_overrides(p, config);
    if (config.get<std::string>("task.name", "siglip") != "siglip")
      throw UserError(path + ": eval supports the siglip task (this checkpoint is " + config.get<std::string>("task.name") + ")");
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
