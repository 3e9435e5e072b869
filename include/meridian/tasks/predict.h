// `meridian predict`'s choices and what it reports, for a task that predicts (TaskSpec::predict;
// detect: tasks::predict_detect).
#pragma once

#include <cstdint>
#include <string>

namespace meridian::tasks {

struct PredictOptions {
  std::string checkpoint, images, out;  // a checkpoint; the images' directory (recursive); outputs
  double conf = 0.25, iou = 0.7;        // confidence threshold; class-aware NMS IoU
  int64_t max_det = 300;                // detections per image at most
  int64_t size = 0;                     // inference size (a multiple of 32); 0: the checkpoint's data.image_size
};

struct PredictSummary {
  int64_t images = 0, unreadable = 0, detections = 0;  // summed over ranks
};

}  // namespace meridian::tasks
