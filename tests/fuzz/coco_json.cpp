// A COCO instances file (prep detection --coco): every image kept, every box placed on its image.
#include "../../src/data/coco_reader.h"
#include "../../src/data/image_decode.h"
#include "fuzz.h"

using namespace meridian;

MERIDIAN_FUZZ_TARGET(coco_json) {
  const std::string path = fuzz::write("instances.json", bytes);
  std::vector<std::string> names;
  const data::CocoImages images = data::read_coco(path, names, [](int64_t) { return true; });
  for (const auto& [i, im] : images.kept)
    for (size_t b = 0; b < im.bboxes.size(); ++b) try {
        data::coco_box(path, im, b, 640, 480);  // as the decoded image's size
      } catch (const data::SkipImage&) {
      }
}
