// An Ultralytics model YAML (model.yaml) through the graph builder: every row's shape checks and the
// layers built, at the YAML's first scale (n for the shipped ones).
#include "fuzz.h"
#include "meridian/core/config.h"
#include "meridian/models/yolo.h"

using namespace meridian;

MERIDIAN_FUZZ_TARGET(model_yaml) {
  const std::string path = fuzz::write("yolo-fuzz.yaml", bytes);
  Config config;
  config.set("model.yaml", path);
  const models::YoloConfig yolo = models::YoloConfig::from_config(config);
  models::Yolo model(yolo);
}
