// `meridian bench memory`: the closed-form memory per rank of a Llama config (tasks::lm_memory)
// for every ZeRO stage, world size and parameter dtype: the table of docs/performance.md. The
// measured side is `meridian train`'s "memory after 3 steps" line.
#include <cstdio>
#include <sstream>

#include "commands.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/config.h"
#include "meridian/core/error.h"
#include "meridian/models/lora.h"
#include "meridian/tasks/lm_task.h"

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
    if (config.text("task.name") != "lm")
      throw ConfigError(config.source("task.name"), "task.name",
                        "bench memory needs a Llama config (task lm), got '" + config.text("task.name") + "'");
    const auto model = models::LlamaConfig::from_config(config);
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
    const double gib = double(int64_t(1) << 30);
    std::printf("bench memory: %s, %lld parameters (%lld per layer), per rank before activations, GiB\n",
                config.origin().c_str(), (long long)model.parameter_count(), (long long)model.block_parameter_count());
    std::printf(
        "| ranks | setup | parameters | gradients | AdamW state | buffers | total on the device | total GB | host "
        "(offloaded) |\n");
    std::printf("|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");
    auto lora = models::LoraConfig::from_config(config);
    lora.rank = p["lora"].as<int64_t>();
    auto row = [&](int64_t w, const std::string& setup, const train::ZeroMemoryReport& r) {
      std::printf("| %lld | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", (long long)w, setup.c_str(),
                  r.parameter_bytes / gib, r.gradient_bytes / gib, r.optimizer_bytes / gib, r.buffer_bytes / gib,
                  r.total() / gib, r.total() / 1e9, r.host_bytes / gib);
    };
    for (const int64_t w : ranks) {
      for (const int64_t bytes : {int64_t(4), int64_t(2)})
        for (int stage = bytes == 4 ? 0 : 1; stage <= 3; ++stage)
          row(w,
              (stage == 0 ? std::string("DDP") : "ZeRO-" + std::to_string(stage)) +
                  (bytes == 4 ? ", float32" : ", bf16 + float32 master"),
              tasks::lm_memory(model, stage, w, bytes));
      for (const int64_t bytes : {int64_t(4), int64_t(2)})
        row(w,
            std::string("ZeRO-3, ") + (bytes == 4 ? "float32" : "bf16 + float32 master") +
                ", state offloaded to host (optim.offload)",
            tasks::lm_memory(model, 3, w, bytes, nullptr, /*offload=*/true));
      if (!lora.enabled()) continue;
      for (const int64_t bytes : {int64_t(4), int64_t(2)})
        for (const int stage : {0, 3}) {
          if (bytes == 2 && stage == 0) continue;  // a bfloat16 base comes with optim.zero only
          row(w,
              "LoRA r=" + std::to_string(lora.rank) + " on " + std::to_string(lora.targets.size()) + " targets, " +
                  (bytes == 4 ? "float32 base" : "bf16 base") + (stage == 0 ? ", DDP" : ", ZeRO-3 (adapters sharded)"),
              tasks::lm_memory(model, stage, w, bytes, &lora));
        }
    }
    return 0;
  };
  return c;
}

}  // namespace meridian::cli
