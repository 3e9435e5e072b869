// `meridian bench memory`: the closed-form memory per rank of a config's model for every ZeRO stage,
// world size and parameter dtype (TaskSpec::memory_table; task lm): the table of
// docs/performance.md. The measured side is `meridian train`'s "memory after 3 steps" line.
#include <cstdio>
#include <sstream>

#include "commands.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/config.h"
#include "meridian/core/error.h"
#include "meridian/tasks/registry.h"

namespace meridian::cli {

Command bench_memory_command() {
  Command c;
  c.name = "bench memory";
  c.summary =
      "Memory per rank of a Llama config (closed form) for DDP and ZeRO-1/2/3, float32 and bf16 parameters, ZeRO-3 "
      "with its state offloaded to host memory";
  c.add_options = [](cxxopts::Options& o) {
    // clang-format off
    o.add_options()
        ("config", "A Llama (task lm) config, e.g. jobs/configs/llama-7b.yaml", cxxopts::value<std::string>())
        ("ranks", "World sizes, comma-separated", cxxopts::value<std::string>()->default_value("8,16"))
        ("lora", "Also LoRA rows, adapters of this rank on the config's task.lora.targets (default q_proj, v_proj); 0: none", cxxopts::value<int64_t>()->default_value("0"));
    // clang-format on
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    if (!p.count("config")) throw UserError("bench memory: give --config (a task lm config)");
    const auto config = Config::load_file(p["config"].as<std::string>());
    const auto table =
        tasks::need(tasks::task_spec(config), &tasks::TaskSpec::memory_table, "bench memory", config.origin());
    std::vector<int64_t> ranks;
    std::stringstream list(p["ranks"].as<std::string>());
    for (std::string item; std::getline(list, item, ',');) {
      try {
        ranks.push_back(std::stoll(item));
      } catch (const std::exception&) {
        throw UserError("bench memory: --ranks: '" + item + "' is not a number");
      }
      if (ranks.back() < 1) throw UserError("bench memory: --ranks: " + item + " is not a world size");
    }
    if (rt.rank() != 0) return 0;
    std::printf("%s", table(config, ranks, p["lora"].as<int64_t>()).c_str());
    return 0;
  };
  return c;
}

}  // namespace meridian::cli
