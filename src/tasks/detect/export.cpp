#include <yaml-cpp/yaml.h>

#include <fstream>

#include "meridian/ckpt/checkpoint.h"
#include "meridian/ckpt/file.h"
#include "meridian/core/config.h"
#include "meridian/core/error.h"
#include "meridian/core/files.h"
#include "meridian/models/yolo.h"
#include "meridian/tasks/detect_task.h"
#include "meridian/tasks/detect_ultralytics.h"
#include "meridian/tasks/registry.h"

namespace meridian::tasks {

namespace {

// The model YAML of `c` for Ultralytics: nc, the one scale trained, the class names, the rows as read.
std::string ultralytics_yaml(const models::YoloConfig& c, const std::vector<std::string>& names) {
  YAML::Node root = YAML::Load(c.spec.text);
  root["nc"] = c.num_classes;
  root.remove("scale");
  if (c.scale.empty()) {
    root["depth_multiple"] = c.depth;
    root["width_multiple"] = c.width;
  } else {
    YAML::Node scale(YAML::NodeType::Sequence);
    scale.SetStyle(YAML::EmitterStyle::Flow);
    scale.push_back(c.depth), scale.push_back(c.width), scale.push_back(c.max_channels);
    YAML::Node scales(YAML::NodeType::Map);
    scales[c.scale] = scale;
    root["scales"] = scales;
  }
  if (!names.empty()) root["names"] = names;
  for (const char* part : {"backbone", "head"})
    for (auto row : root[part]) row.SetStyle(YAML::EmitterStyle::Flow);
  YAML::Emitter out;
  out << root;
  return "# Written by meridian export from " + c.spec.source + " (scale " + (c.scale.empty() ? "-" : c.scale) + ", " +
         std::to_string(c.num_classes) + " classes).\n" + out.c_str() + "\n";
}

}  // namespace

HfExport export_ultralytics(const std::string& checkpoint, const std::string& out, const std::string& dtype) {
  HfExportDir dir(out, dtype);  // checks dtype and out first; removed again on any failure below
  ckpt::Reader reader(checkpoint);
  const Config config = ckpt::saved_config(reader);
  if (task_name(config) != "detect")
    throw UserError(checkpoint + ": not a detect checkpoint (task " + task_name(config) + ")");
  const auto mc = models::YoloConfig::from_config(config);
  models::Yolo model(mc);
  ckpt::load_module(checkpoint, *model);
  // state_dict's order: each module's own parameters, then its buffers, depth first.
  models::NamedTensors tensors;
  for (const auto& m : model->named_modules()) {
    const std::string prefix = m.key().empty() ? "" : m.key() + ".";
    for (const auto& p : m.value()->named_parameters(/*recurse=*/false))
      tensors.emplace_back(prefix + p.key(), p.value());
    for (const auto& b : m.value()->named_buffers(/*recurse=*/false)) tensors.emplace_back(prefix + b.key(), b.value());
  }
  dir.write_weights(std::move(tensors), int64_t{1} << 62);  // one file: Ultralytics loads one state_dict
  write_file_atomically(dir.file(mc.spec.family + ".yaml"),
                        ultralytics_yaml(mc, DetectSettings::from_config(config).class_names));
  return dir.commit("");
}

}  // namespace meridian::tasks
