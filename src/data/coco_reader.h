// Private to data/: COCO instances files of prep detection.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace meridian::data {

struct CocoImage {
  std::string file;                           // 'file_name', relative to the images directory
  std::vector<std::array<double, 4>> bboxes;  // as in the file: x, y, w, h in source pixels
  std::vector<size_t> annotations;            // each bbox's index in 'annotations', for messages
  std::vector<int32_t> classes;               // each bbox's class (position of its category)
};

// Parses the COCO instances file `path`: images in file order (crowd annotations left out),
// categories sorted by id, appended to `class_names` (class = position). Throws DataError naming the
// file and the field for a missing or malformed part.
std::vector<CocoImage> read_coco(const std::string& path, std::vector<std::string>& class_names);

// Box `b` of `im` as x_min, y_min, x_max, y_max on its width x height image. A box that is not on
// the image (a negative size, or its centre or size outside, the rule YOLO labels follow) throws
// SkipImage naming the COCO file `path` and the annotation.
std::array<float, 4> coco_box(const std::string& path, const CocoImage& im, size_t b, int width, int height);

}  // namespace meridian::data
