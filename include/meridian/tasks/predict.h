// `meridian predict`'s choices and what it reports, for a task that predicts (TaskSpec::predict:
// detect's boxes, tasks::predict_detect; siglip's zero-shot classes, tasks::predict_siglip).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace meridian::tasks {

struct PredictOptions {
  std::string images, out;        // a directory of images (recursive) or one image file; outputs
  double conf = 0.25, iou = 0.7;  // confidence threshold; class-aware NMS IoU
  int64_t max_det = 300;          // detections per image at most
  int64_t size = 0;               // inference size (a multiple of 32); 0: the checkpoint's data.image_size
  // Zero-shot classification (siglip): the class names, and how many of the best to write per image.
  std::vector<std::string> classes;
  int64_t top_k = 5;
  int64_t batch = 32;     // images per forward on each rank
  std::string tokenizer;  // siglip: as load_siglip's ("": the model's)
};

struct PredictSummary {
  int64_t images = 0, unreadable = 0;  // summed over ranks
  std::string found;                   // what was found and written, for the command's line
};

}  // namespace meridian::tasks
