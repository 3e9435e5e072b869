// Private to data/: COCO instances files of prep detection.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace meridian::data {

struct CocoImage {
  std::string file;                                 // 'file_name', relative to the images directory
  int64_t id = -1;                                  // 'id'
  std::vector<std::array<double, 4>> bboxes;        // as in the file: x, y, w, h in source pixels
  std::vector<size_t> annotations;                  // each bbox's index in 'annotations', for messages
  std::vector<int32_t> classes;                     // each bbox's class (position of its category)
  std::vector<double> areas;                        // each bbox's annotation 'area' (segmentation), else w x h
  std::vector<std::array<double, 4>> crowd_bboxes;  // iscrowd regions: x, y, w, h in source pixels
  std::vector<int32_t> crowd_classes;
};

// What read_coco returns: every image counted, the ones `keep` asked for in full.
struct CocoImages {
  int64_t count = 0;                  // images in the file
  std::map<int64_t, CocoImage> kept;  // by position in 'images' (file order)
  std::vector<int64_t> category_ids;  // of class_names' entries (categories sorted by id)
};

// Parses the COCO instances file `path` without holding it whole: each image and annotation is
// looked at and dropped unless it belongs to an image at a position `keep(i)` accepts (prep: this
// rank's rows). Crowd annotations are kept apart (crowd_bboxes: not instances, evaluation ignores
// detections on them); categories are sorted by id and appended to
// `class_names` (class = position). Memory: the kept images' boxes and 8 bytes per image (its id,
// to tell an annotation of another rank's image from one of no image). Throws DataError naming the
// file and the field for a missing or malformed part.
CocoImages read_coco(const std::string& path, std::vector<std::string>& class_names,
                     const std::function<bool(int64_t)>& keep);

// Box `b` of `im` as x_min, y_min, x_max, y_max on its width x height image. A box that is not on
// the image (a negative size, or its centre or size outside, the rule YOLO labels follow) throws
// SkipImage naming the COCO file `path` and the annotation.
std::array<float, 4> coco_box(const std::string& path, const CocoImage& im, size_t b, int width, int height);

}  // namespace meridian::data
