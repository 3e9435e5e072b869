// `meridian model --config C [--image-size N]`: the layers, parameters and GFLOPs of a config's
// model (tasks::summarize_model), as Ultralytics' model.info() prints them. Rank 0 prints.
#include <cstdio>

#include "commands.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/config.h"
#include "meridian/core/error.h"
#include "meridian/tasks/model_summary.h"
#include "meridian/tasks/registry.h"

namespace meridian::cli {

Command model_command() {
  Command c;
  c.name = "model";
  c.summary = "Layers, parameters and GFLOPs of a config's model (any task; nothing trained or read)";
  c.add_options = [](cxxopts::Options& o) {
    // clang-format off
    o.add_options()
        ("config", "A run config, e.g. jobs/configs/detect-synthetic.yaml", cxxopts::value<std::string>())
        ("image-size", "detect: the input size for the FLOPs (default data.image_size, else 640)", cxxopts::value<int64_t>()->default_value("0"))
        ("set", "Override a config key (key=value), repeatable", cxxopts::value<std::vector<std::string>>());
    // clang-format on
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    if (!p.count("config")) throw UserError("model: give --config (a run config)");
    Config config = Config::load_file(p["config"].as<std::string>());
    apply_overrides(p, config);
    tasks::apply_init_config(config);
    tasks::validate_config(config);
    const auto summary = tasks::summarize_model(config, p["image-size"].as<int64_t>());
    if (rt.rank() == 0) std::printf("%s\n", tasks::to_string(summary).c_str());
    return 0;
  };
  return c;
}

}  // namespace meridian::cli
