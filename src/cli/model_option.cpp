// The one way every command names a model (--model, with --checkpoint and eval's --init as aliases).
#include <spdlog/spdlog.h>

#include "commands.h"
#include "meridian/ckpt/checkpoint.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/config.h"
#include "meridian/core/error.h"

namespace meridian::cli {

void add_model_option(cxxopts::Options& o, const std::string& help) {
  // clang-format off
  o.add_options()
      ("model", help + ": a checkpoint (<run>/checkpoints/step_*.h5 or best.h5), a Hugging Face model directory (SigLIP, Llama) or Ultralytics .safetensors (with --set model.yaml=..., or its YAML beside it)", cxxopts::value<std::string>()->default_value(""))
      ("checkpoint", "The same as --model", cxxopts::value<std::string>()->default_value(""))
      ("no-verify", "Read a checkpoint whose whole-file checksum does not match (or is damaged) anyway; by default such a file is refused before HDF5 reads it");
  // clang-format on
}

tasks::ModelSource open_model_option(const cxxopts::ParseResult& p, const comm::Runtime& rt, const std::string& command,
                                     const std::function<void(Config&)>& adjust) {
  std::string path;
  for (const char* name : {"model", "checkpoint", "init"}) {
    if (!p.count(name) || p[name].as<std::string>().empty()) continue;
    if (!path.empty()) throw UserError(command + ": give the model once (--model; --checkpoint is the same)");
    path = p[name].as<std::string>();
  }
  if (path.empty()) throw UserError(command + ": --model is required");
  ckpt::set_verify_checksums(!p.count("no-verify"));
  auto model = tasks::open_model(path, command, [&](Config& config) {
    apply_overrides(p, config);
    if (adjust) adjust(config);
  });
  if (rt.rank() == 0) spdlog::info("{}: {}", command, model.what);
  return model;
}

}  // namespace meridian::cli
