#include "meridian/tasks/model_source.h"

#include <filesystem>

#include "meridian/ckpt/checkpoint.h"
#include "meridian/ckpt/file.h"
#include "meridian/core/error.h"
#include "meridian/models/hf_checkpoint.h"
#include "meridian/ops/peak.h"
#include "meridian/tasks/registry.h"

namespace meridian::tasks {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The task that reads published weights as one file (detect's Ultralytics .safetensors).
const TaskSpec& file_task() {
  const TaskSpec* found = nullptr;
  for (const TaskSpec* s : task_specs())
    if (s->published_file) found = s;
  MERIDIAN_CHECK(found != nullptr, "no task reads published weights as one file");
  return *found;
}

// bf16 or fp16 autocast for the command where the model's config says so (a bf16 or fp16 run's
// checkpoint, or --set train.precision=...), as training evaluated it.
ModelSource with_precision(ModelSource m) {
  m.precision = m.config.get<std::string>("train.precision", "float32");
  if (m.precision != "float32") m.what += ", in " + m.precision + " (train.precision)";
  return m;
}

}  // namespace

ModelSource open_model(const std::string& path, const std::string& command,
                       const std::function<void(Config&)>& adjust) {
  if (path.empty()) throw UserError(command + ": --model is required");
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw UserError(command + ": --model " + path +
                    " does not exist (a checkpoint .h5, a Hugging Face model directory or Ultralytics .safetensors)");
  ModelSource m;
  m.path = path;
  if (!fs::is_directory(path) && !ends_with(path, ".safetensors")) {  // a checkpoint
    const ckpt::Reader reader(path);
    m.config = ckpt::saved_config(reader);
    if (adjust) adjust(m.config);
    m.spec = &task_spec(m.config);
    m.step = reader.int_attribute("step").value_or(0);
    m.what = "checkpoint " + path + " (task " + m.spec->name + ", step " + std::to_string(m.step) + ")";
    return with_precision(std::move(m));
  }
  m.published = true;
  if (fs::is_directory(path)) {
    m.spec = &published_task(path);
    const auto json = models::read_hf_config(path);
    std::string kind = json.value("model_type", std::string());
    if (json.contains("architectures") && json["architectures"].is_array() && !json["architectures"].empty() &&
        json["architectures"][0].is_string())
      kind = json["architectures"][0].get<std::string>();
    m.what = "Hugging Face " + kind + " directory " + path + " (task " + m.spec->name + ", published weights)";
  } else {
    m.spec = &file_task();
    m.what = std::string(m.spec->published_file) + " " + path + " (task " + m.spec->name + ")";
  }
  // The task first, so that the command's keys are checked as that task's.
  Config config = Config::parse("{}", "--model " + path);
  config.set("task.name", m.spec->name, "--model " + path);
  if (adjust) adjust(config);
  if (task_name(config) != m.spec->name)
    throw UserError(command + ": " + path + " is a model of task " + m.spec->name + ", not " + task_name(config));
  config.set("task.init", yaml_quoted(path), "--model");
  apply_init_config(config);
  if (!fs::is_directory(path)) m.what += m.spec->published_file_config(config, path);
  validate_config(config);
  m.config = std::move(config);
  return with_precision(std::move(m));
}

at::ScalarType ModelSource::autocast_dtype(c10::Device device) const {
  const std::string p = precision == "auto" ? ops::choose_precision(device).precision : precision;
  return p == "bf16" ? at::kBFloat16 : p == "fp16" ? at::kHalf : at::kFloat;
}

void require_model_task(const ModelSource& model, const std::string& wanted, const std::string& command) {
  if (wanted.empty() || wanted == model.spec->name) return;
  throw UserError(command + ": " + model.path + " is a model of task " + model.spec->name + ", not " + wanted);
}

}  // namespace meridian::tasks
