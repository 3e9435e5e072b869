// `meridian model`: a model's layers, parameters and forward FLOPs from its config alone (no data,
// no checkpoint), the way Ultralytics' model.info() summarises a model. Not collective.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meridian/core/config.h"

namespace torch::nn {
class Module;
}

namespace meridian::tasks {

struct ModelSummary {
  struct Layer {
    std::string name, type;  // as in the model's state_dict names; the module's class
    int64_t parameters = 0;
  };
  std::string task;
  std::vector<Layer> layers;  // top-level modules; a module holding a ModuleList is listed by its children
                              // and the list by its items (one row per block)
  int64_t modules = 0, parameters = 0;
  double gflops = 0;   // forward, one sample
  std::string sample;  // what one sample is: "a 640x640 image", "a sequence of 2048 tokens", ...
};

// The model of `config`'s task (validated: validate_config first), built on the CPU (TaskSpec::summarize:
// a Llama shape-only, no memory). image_size: the input size for the FLOPs where the task has one
// (detect: 0 is data.image_size, else 640 as Ultralytics reports); UserError when given for a task
// without one.
ModelSummary summarize_model(const Config& config, int64_t image_size);

// What a task's summarize returns: one row per top-level module of `model` (a module holding a
// ModuleList listed by its children, the list by its items), its parameters, `flops` for one
// `sample` (what one sample is, for the summary line).
ModelSummary summarize_module(const std::string& task, const torch::nn::Module& model, double flops,
                              std::string sample);

// A table of the layers, then "<task> summary: M modules, P parameters, G GFLOPs (per <sample>)".
std::string to_string(const ModelSummary& summary);

}  // namespace meridian::tasks
