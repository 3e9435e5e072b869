// A training config file (meridian train --config) through the schema, then read as a run reads it:
// the trainer's, checkpoint's and data settings and the task's model config.
#include "fuzz.h"
#include "meridian/ckpt/checkpoint.h"
#include "meridian/core/config.h"
#include "meridian/models/llama.h"
#include "meridian/models/lora.h"
#include "meridian/models/siglip.h"
#include "meridian/models/yolo.h"
#include "meridian/tasks/registry.h"
#include "meridian/tasks/spec.h"
#include "meridian/train/settings.h"

using namespace meridian;

MERIDIAN_FUZZ_TARGET(config_yaml) {
  const std::string path = fuzz::write("config.yaml", bytes);
  Config config = Config::load_file(path);
  tasks::validate_config(config);
  const Config full = tasks::with_defaults(config);
  tasks::DataSettings::from_config(config);
  train::TrainerSettings::from_config(config);
  ckpt::CheckpointSettings::from_config(config, fuzz::scratch());
  const std::string task = tasks::task_spec(config).name;
  if (task == "siglip") models::SiglipConfig::from_config(config);
  if (task == "lm") models::LlamaConfig::from_config(config), models::LoraConfig::from_config(config);
  if (task == "detect") models::YoloConfig::from_config(config);
}
