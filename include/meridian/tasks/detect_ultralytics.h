// A detect checkpoint as Ultralytics loads it (`meridian export`, docs/running.md "Start from a
// COCO-pretrained Ultralytics YOLO"): the weights under Ultralytics' state_dict names and the model
// YAML they belong to. Training from Ultralytics weights is DetectTask's task.init
// (models::load_ultralytics_weights).
#pragma once

#include <string>

#include "meridian/tasks/hf_export.h"

namespace meridian::tasks {

// Not collective; one process writes. Writes the directory `out` whole or not at all (HfExportDir):
//   model.safetensors  the checkpoint's weights (its EMA when it has one, as Ultralytics saves) and
//                      BatchNorm buffers, named as Ultralytics' DetectionModel.state_dict(); floats in
//                      dtype (f32 or bf16), num_batches_tracked as int64
//   <family>.yaml      the model YAML it was trained from with nc set to the model's classes, `scales`
//                      reduced to the one trained (Ultralytics takes a YAML's first scale when its
//                      name carries none), and `names`: the class names
// UserError for another task's checkpoint, a bad dtype, an existing `out`; DataError naming the
// checkpoint for weights that do not fit its model.
HfExport export_ultralytics(const std::string& checkpoint, const std::string& out, const std::string& dtype);

}  // namespace meridian::tasks
