#include "coco_reader.h"

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "image_decode.h"
#include "meridian/core/error.h"
#include "yolo_reader.h"

namespace meridian::data {

std::array<float, 4> coco_box(const std::string& path, const CocoImage& im, size_t b, int width, int height) {
  const auto [x, y, w, h] = im.bboxes[b];
  std::ostringstream where;
  where << path << ": annotations[" << im.annotations[b] << "]: bbox [" << x << ", " << y << ", " << w << ", " << h
        << "]";
  if (w < 0 || h < 0) throw SkipImage{where.str() + " has a negative width or height"};
  const std::string outside = outside_unit({(x + w / 2) / width, (y + h / 2) / height, w / width, h / height});
  if (!outside.empty())
    throw SkipImage{where.str() + " is not on the " + std::to_string(width) + "x" + std::to_string(height) +
                    " image '" + im.file + "' (as a fraction of the image, " + outside + ")"};
  return {float(x), float(y), float(x + w), float(y + h)};
}

std::vector<CocoImage> read_coco(const std::string& path, std::vector<std::string>& class_names) {
  std::ifstream in(path);
  if (!in) throw DataError(path, "COCO file", "cannot open the file");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    throw DataError(path, "COCO file", std::string("not valid JSON: ") + e.what());
  }
  for (const char* key : {"images", "annotations", "categories"})
    if (!j.contains(key) || !j[key].is_array()) throw DataError(path, key, "missing (expected a list)");
  std::string where = "categories";  // what is being read, for a value of the wrong type
  try {
    std::map<int64_t, std::string> categories;
    for (const auto& c : j["categories"]) {
      if (!c.contains("id") || !c.contains("name")) throw DataError(path, "categories", "each needs 'id' and 'name'");
      categories[c["id"].get<int64_t>()] = c["name"].get<std::string>();
    }
    std::map<int64_t, int32_t> class_of;
    for (const auto& [id, name] : categories) class_of[id] = int32_t(class_names.size()), class_names.push_back(name);
    std::vector<CocoImage> images;
    std::map<int64_t, size_t> index;
    where = "images";
    for (const auto& im : j["images"]) {
      if (!im.contains("id") || !im.contains("file_name"))
        throw DataError(path, "images", "each needs 'id' and 'file_name'");
      index[im["id"].get<int64_t>()] = images.size();
      images.push_back({im["file_name"].get<std::string>(), {}, {}, {}});
    }
    for (size_t n = 0; n < j["annotations"].size(); ++n) {
      const auto& a = j["annotations"][n];
      where = "annotations[" + std::to_string(n) + "]";
      if (!a.contains("image_id") || !a.contains("bbox") || !a.contains("category_id") || !a["bbox"].is_array() ||
          a["bbox"].size() != 4)
        throw DataError(path, where, "needs 'image_id', 'category_id' and 'bbox' [x, y, w, h]");
      if (a.value("iscrowd", 0) == 1) continue;  // crowd regions are not instances
      const auto im = index.find(a["image_id"].get<int64_t>());
      const auto cls = class_of.find(a["category_id"].get<int64_t>());
      if (im == index.end()) throw DataError(path, where, "image_id not in 'images'");
      if (cls == class_of.end()) throw DataError(path, where, "category_id not in 'categories'");
      const auto& b = a["bbox"];
      images[im->second].bboxes.push_back(
          {b[0].get<double>(), b[1].get<double>(), b[2].get<double>(), b[3].get<double>()});
      images[im->second].annotations.push_back(n);
      images[im->second].classes.push_back(cls->second);
    }
    return images;
  } catch (const nlohmann::json::type_error& e) {
    throw DataError(
        path, where,
        std::string("a value of the wrong type (ids are integers, names strings, bbox numbers): ") + e.what());
  }
}

}  // namespace meridian::data
