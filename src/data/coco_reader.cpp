#include "coco_reader.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "image_decode.h"
#include "meridian/core/error.h"
#include "meridian/core/json_file.h"
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

CocoImages read_coco(const std::string& path, std::vector<std::string>& class_names,
                     const std::function<bool(int64_t)>& keep) {
  std::ifstream in(path);
  if (!in) throw DataError(path, "COCO file", "cannot open the file");
  struct Box {
    int64_t image_id, category_id;
    size_t annotation;
    std::array<double, 4> bbox;
    bool crowd;
    double area;  // the annotation's 'area', else w x h
  };
  CocoImages out;
  std::vector<int64_t> ids;                   // every image's id, in file order
  std::map<int64_t, int64_t> kept_at;         // kept image id -> position
  std::vector<Box> boxes;                     // annotations of kept images (of any image while none seen yet)
  std::vector<int64_t> sorted_ids;            // `ids` sorted, once the images are read
  std::map<int64_t, size_t> used_categories;  // of the annotations not kept: first annotation using each
  // The first bad annotation in file order: every rank sees every annotation, so every rank reports
  // the same one whichever images it keeps.
  size_t first_bad = SIZE_MAX;
  std::string bad_problem;
  const auto bad = [&](size_t n, const std::string& problem) {
    if (n < first_bad) first_bad = n, bad_problem = problem;
  };
  std::map<int64_t, std::string> categories;
  int64_t annotations = 0;
  bool images_seen = false;
  std::string where;  // what is being read, for a value of the wrong type
  // Each element of the top-level lists is handled when it is complete, then dropped from the tree
  // the parser builds: the tree never holds more than one element and the small lists.
  const auto element = [&](const std::string& list, const nlohmann::json& e) {
    if (list == "images") {
      where = "images";
      if (!e.is_object() || !e.contains("id") || !e.contains("file_name"))
        throw DataError(path, "images", "each needs 'id' and 'file_name'");
      const int64_t i = int64_t(ids.size());
      ids.push_back(json_integer(e["id"], path, "images[" + std::to_string(i) + "].id"));
      if (keep(i)) {
        kept_at[ids.back()] = i;
        out.kept[i].file = e["file_name"].get<std::string>();
        out.kept[i].id = ids.back();
      }
    } else if (list == "annotations") {
      const size_t n = size_t(annotations++);
      where = "annotations[" + std::to_string(n) + "]";
      if (!e.is_object() || !e.contains("image_id") || !e.contains("bbox") || !e.contains("category_id") ||
          !e["bbox"].is_array() || e["bbox"].size() != 4)
        throw DataError(path, where, "needs 'image_id', 'category_id' and 'bbox' [x, y, w, h]");
      const int64_t image = json_integer(e["image_id"], path, where + ".image_id");
      const auto& b = e["bbox"];
      Box box{image,
              json_integer(e["category_id"], path, where + ".category_id"),
              n,
              {b[0].get<double>(), b[1].get<double>(), b[2].get<double>(), b[3].get<double>()},
              e.contains("iscrowd") && json_integer(e["iscrowd"], path, where + ".iscrowd") == 1,
              0.0};
      box.area = e.contains("area") ? e["area"].get<double>() : box.bbox[2] * box.bbox[3];
      if (!images_seen || kept_at.count(image)) {
        boxes.push_back(box);
      } else {  // another rank's image (or none at all): checked, then dropped
        if (!std::binary_search(sorted_ids.begin(), sorted_ids.end(), image)) bad(n, "image_id not in 'images'");
        used_categories.emplace(box.category_id, n);  // keeps the first annotation of each category
      }
    } else if (list == "categories") {
      where = "categories";
      if (!e.is_object() || !e.contains("id") || !e.contains("name"))
        throw DataError(path, "categories", "each needs 'id' and 'name'");
      categories[json_integer(e["id"], path, "categories.id")] = e["name"].get<std::string>();
    }
  };
  std::string list;  // the top-level list being read
  std::vector<std::string> seen_lists;
  const auto handled = [&] { return list == "images" || list == "annotations" || list == "categories"; };
  const nlohmann::json::parser_callback_t cb = [&](int depth, nlohmann::json::parse_event_t event,
                                                   nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (depth == 1 && event == E::key) list = parsed.get<std::string>();
    if (depth == 1 && event == E::array_start && handled()) seen_lists.push_back(list);
    if (depth == 1 && event == E::array_end && list == "images") {
      images_seen = true;
      sorted_ids = ids;
      std::sort(sorted_ids.begin(), sorted_ids.end());
    }
    if (depth == 2 && handled() && (event == E::object_end || event == E::array_end || event == E::value)) {
      element(list, parsed);
      return false;  // handled: not kept in the tree
    }
    return true;
  };
  try {
    nlohmann::json::parse(in, cb);
  } catch (const nlohmann::json::type_error& e) {
    throw DataError(
        path, where,
        std::string("a value of the wrong type (ids are integers, names strings, bbox numbers): ") + e.what());
  } catch (const nlohmann::json::exception& e) {
    throw DataError(path, "COCO file", std::string("not valid JSON: ") + e.what());
  }
  for (const char* key : {"images", "annotations", "categories"})
    if (std::find(seen_lists.begin(), seen_lists.end(), key) == seen_lists.end())
      throw DataError(path, key, "missing (expected a list)");
  std::map<int64_t, int32_t> class_of;
  for (const auto& [id, name] : categories) {
    class_of[id] = int32_t(class_names.size());
    class_names.push_back(name);
    out.category_ids.push_back(id);
  }
  if (!images_seen) {
    sorted_ids = ids;
    std::sort(sorted_ids.begin(), sorted_ids.end());
  }
  for (const auto& [c, n] : used_categories)
    if (!class_of.count(c)) bad(n, "category_id not in 'categories'");
  out.count = int64_t(ids.size());
  if (!images_seen)  // the annotations came first: every one was kept, the images are known now
    for (const auto& [i, im] : out.kept) kept_at[ids[size_t(i)]] = i;
  for (const auto& box : boxes) {
    if (!std::binary_search(sorted_ids.begin(), sorted_ids.end(), box.image_id)) {
      bad(box.annotation, "image_id not in 'images'");
      continue;
    }
    const auto cls = class_of.find(box.category_id);
    if (cls == class_of.end()) {
      bad(box.annotation, "category_id not in 'categories'");
      continue;
    }
    const auto im = kept_at.find(box.image_id);
    if (im == kept_at.end()) continue;  // another rank's (the annotations came before the images)
    CocoImage& image = out.kept[im->second];
    if (box.crowd) {
      image.crowd_bboxes.push_back(box.bbox);
      image.crowd_classes.push_back(cls->second);
      continue;
    }
    image.bboxes.push_back(box.bbox);
    image.annotations.push_back(box.annotation);
    image.classes.push_back(cls->second);
    image.areas.push_back(box.area);
  }
  if (first_bad != SIZE_MAX) throw DataError(path, "annotations[" + std::to_string(first_bad) + "]", bad_problem);
  return out;
}

}  // namespace meridian::data
