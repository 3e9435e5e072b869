// An Ultralytics dataset description (prep detection --data data.yaml), each split.
#include <filesystem>

#include "../../src/data/yolo_reader.h"
#include "fuzz.h"
#include "meridian/core/error.h"

using namespace meridian;

MERIDIAN_FUZZ_TARGET(data_yaml) {
  const std::string& dir = fuzz::scratch();
  for (const char* d : {"images/train", "images/val", "labels/train", "train", "val"})
    std::filesystem::create_directories(dir + "/" + d);
  const std::string path = fuzz::write("data.yaml", bytes);
  for (const char* split : {"train", "val", "test"}) try {
      data::read_data_yaml(path, split);
    } catch (const UserError&) {
    }
}
