// YOLO label files and class-name files (prep detection --labels, --class-names).
#include "../../src/data/image_decode.h"
#include "../../src/data/yolo_reader.h"
#include "fuzz.h"

using namespace meridian;

MERIDIAN_FUZZ_TARGET(yolo_labels) {
  const std::string path = fuzz::write("labels/img.txt", bytes);
  std::vector<std::array<float, 4>> boxes;
  std::vector<int32_t> classes;
  try {
    data::read_yolo(path, 640, 480, boxes, classes);
  } catch (const data::SkipImage&) {
  }
  data::read_class_names(path);
}
