// `meridian train`: SigLIP training on an image-text dataset (first cut: no checkpoints yet).
#include <cstdio>

#include "commands.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/train/siglip_trainer.h"

namespace meridian::cli {

Command train_command() {
  Command c;
  c.name = "train";
  c.summary = "Train a SigLIP image-text model data-parallel (run under mpirun)";
  c.add_options = [](cxxopts::Options& o) {
    o.add_options()
        ("config", "YAML with model: and train: sections (jobs/configs/siglip-*.yaml)", cxxopts::value<std::string>()->default_value(""))
        ("data", "Image-text dataset (.h5, from meridian prep)", cxxopts::value<std::string>()->default_value(""))
        ("set", "Override a config value, key=value (repeatable), e.g. --set train.steps=50", cxxopts::value<std::vector<std::string>>());
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    train::TrainOptions o;
    const std::string config = p["config"].as<std::string>();
    if (config.empty()) throw UserError("train: --config is required (e.g. jobs/configs/siglip-tiny.yaml)");
    o.config = Config::load_file(config);
    if (p.count("set"))
      for (const auto& kv : p["set"].as<std::vector<std::string>>()) {
        const auto eq = kv.find('=');
        if (eq == std::string::npos) throw UserError("--set: expected key=value, got '" + kv + "'");
        o.config.set(kv.substr(0, eq), kv.substr(eq + 1));
      }
    o.data = p["data"].as<std::string>();
    if (o.data.empty()) throw UserError("train: --data is required");
    o.run_dir = p["run-dir"].as<std::string>();
    const auto r = train::train_siglip(rt, o);
    if (rt.rank() == 0) {
      std::printf("train: %zu steps, loss %.4f -> %.4f, %.1f samples/s over %d ranks, %.2fM parameters\n", r.losses.size(),
                  r.losses.front(), r.losses.back(), r.samples_per_s, rt.size(), r.parameters / 1e6);
      if (r.evaluated)
        std::printf("eval: i2t R@1 %.1f R@5 %.1f R@10 %.1f  t2i R@1 %.1f R@5 %.1f R@10 %.1f  zero-shot %.1f%%\n",
                    r.eval.image_to_text[0], r.eval.image_to_text[1], r.eval.image_to_text[2], r.eval.text_to_image[0],
                    r.eval.text_to_image[1], r.eval.text_to_image[2], r.eval.zero_shot_top1);
    }
    return 0;
  };
  return c;
}

}  // namespace meridian::cli
