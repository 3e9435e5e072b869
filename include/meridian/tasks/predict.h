// `meridian predict`'s work: a detect checkpoint run on a directory of images, each image written
// with its boxes drawn and a YOLO-format label file (class cx cy w h confidence, normalised to the
// image).
#pragma once

#include <cstdint>
#include <string>

namespace meridian::comm {
class Runtime;
}

namespace meridian::tasks {

struct PredictOptions {
  std::string checkpoint, images, out;  // a detect checkpoint; the images' directory (recursive); outputs
  double conf = 0.25, iou = 0.7;        // confidence threshold; class-aware NMS IoU
  int64_t max_det = 300;                // detections per image at most
  int64_t size = 0;                     // inference size (a multiple of 32); 0: the checkpoint's data.image_size
};

struct PredictSummary {
  int64_t images = 0, unreadable = 0, detections = 0;  // summed over ranks
};

// Collective (a barrier, sums): every rank takes every size-th image of the sorted list and writes
// <out>/<name>.jpg and <out>/labels/<name>.txt. UserError for another task's checkpoint, a bad size,
// no images, or two images that would write the same output (naming both); an unreadable image is
// logged, skipped and counted.
PredictSummary predict_directory(const comm::Runtime& runtime, const PredictOptions& options);

}  // namespace meridian::tasks
