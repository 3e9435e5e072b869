// `meridian export`: a language-model checkpoint's weights as Hugging Face safetensors, LoRA
// adapters merged (tasks::export_merged).
#include <spdlog/spdlog.h>

#include "commands.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/tasks/lm_task.h"

namespace meridian::cli {

Command export_command() {
  Command c;
  c.name = "export";
  c.summary = "Write an lm checkpoint's weights as Hugging Face safetensors, LoRA adapters merged into the base";
  c.add_options = [](cxxopts::Options& o) {
    // clang-format off
    o.add_options()
        ("checkpoint", "Checkpoint of a task lm run (step_*.h5)", cxxopts::value<std::string>())
        ("out", "safetensors file to write", cxxopts::value<std::string>());
    // clang-format on
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    if (!p.count("checkpoint") || !p.count("out")) throw UserError("export: give --checkpoint and --out");
    if (rt.rank() != 0) return 0;
    const auto path = p["checkpoint"].as<std::string>(), out = p["out"].as<std::string>();
    const int64_t n = tasks::export_merged(path, out);
    spdlog::info("export: wrote {} tensors to {} (adapters merged, Hugging Face names)", n, out);
    return 0;
  };
  return c;
}

}  // namespace meridian::cli
