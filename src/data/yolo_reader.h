// Private to data/: YOLO label files and class-name files of prep detection.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace meridian::data {

// A box as fractions of its image (centre cx, cy, size w, h) must lie in [0, 1], up to rounding:
// "cx = 1.3 is outside [0, 1]" for the first value that does not, else empty. A box whose centre
// is inside may still reach past the edge: place_box clips it. COCO boxes follow the same rule.
std::string outside_unit(const std::array<double, 4>& v);

// YOLO label file: "class cx cy w h" per line, normalised to the width x height image; appends
// x_min, y_min, x_max, y_max in source pixels to `boxes` and the classes to `classes`. A missing
// file means no boxes. A malformed line, or values outside the image, throw SkipImage naming the
// file and line.
void read_yolo(const std::string& file, int width, int height, std::vector<std::array<float, 4>>& boxes,
               std::vector<int32_t>& classes);

// Class names, one per non-empty line (a trailing '\r' dropped). Throws DataError naming the file
// (as `--class-names`) when it cannot be opened.
std::vector<std::string> read_class_names(const std::string& file);

// One split of an Ultralytics dataset description (data.yaml, as `yolo train data=...` reads it):
//   path   the dataset root; relative to the file's directory (default: that directory)
//   train, val, test   an image directory, relative to path
//   names  a list, or a map 0..nc-1 -> name;  nc (optional) must equal their count
// The labels are where Ultralytics looks: the image directory with its last "images" component
// replaced by "labels" (<root>/images/train -> <root>/labels/train), else the image directory.
// DataError naming the file and field: unreadable or not a map, names missing, empty or with gaps,
// nc disagreeing, the split missing or not one directory (an image list .txt, a list of
// directories), the directory absent.
struct YoloSplit {
  std::string images_dir, labels_dir;
  std::vector<std::string> class_names;
};
YoloSplit read_data_yaml(const std::string& file, const std::string& split);

}  // namespace meridian::data
