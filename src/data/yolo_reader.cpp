#include "yolo_reader.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>

#include "image_decode.h"
#include "meridian/core/error.h"
#include "text_lines.h"

namespace meridian::data {

std::string outside_unit(const std::array<double, 4>& v) {
  static const char* const kNames[] = {"cx", "cy", "w", "h"};
  for (int k = 0; k < 4; ++k)
    if (!(v[k] >= -1e-6 && v[k] <= 1 + 1e-6)) {
      std::ostringstream text;
      text << kNames[k] << " = " << v[k] << " is outside [0, 1]";
      return text.str();
    }
  return {};
}

void read_yolo(const std::string& file, int width, int height, std::vector<std::array<float, 4>>& boxes,
               std::vector<int32_t>& classes) {
  TextLines in(file);
  if (!in) return;
  std::string line;
  int lineno = 0;
  while (in.next(line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::istringstream ss(line);
    double c = -1, cx, cy, w, h;
    std::string rest;
    const std::string where = file + ": line " + std::to_string(lineno) + ": ";
    if (!(ss >> c >> cx >> cy >> w >> h) || (ss >> rest) || c < 0 || c > 100000 || c != std::floor(c))
      throw SkipImage{where + "expected 'class cx cy w h' (class an integer 0..100000)"};
    const std::string outside = outside_unit({cx, cy, w, h});
    if (!outside.empty())
      throw SkipImage{where + outside + " (YOLO labels are normalised to the image" +
                      (std::max({cx, cy, w, h}) > 1 ? "; these look like pixels?)" : ")")};
    boxes.push_back({float((cx - w / 2) * width), float((cy - h / 2) * height), float((cx + w / 2) * width),
                     float((cy + h / 2) * height)});
    classes.push_back(int32_t(c));
  }
}

std::vector<std::string> read_class_names(const std::string& file) {
  TextLines in(file);
  if (!in) throw DataError(file, "--class-names", "cannot open the file");
  std::vector<std::string> names;
  std::string line;
  while (in.next(line))
    if (!line.empty() && line != "\r") names.push_back(line.back() == '\r' ? line.substr(0, line.size() - 1) : line);
  return names;
}

YoloSplit read_data_yaml(const std::string& file, const std::string& split) {
  namespace fs = std::filesystem;
  YAML::Node root;
  try {
    root = YAML::LoadFile(file);
  } catch (const YAML::BadFile&) {
    throw DataError(file, "--data-yaml", "cannot be read");
  } catch (const YAML::Exception& e) {
    throw DataError(file, "--data-yaml", std::string("is not valid YAML: ") + e.what());
  }
  if (!root.IsMap()) throw DataError(file, "--data-yaml", "is not a YAML map (Ultralytics' path, train, val, names)");
  const auto text = [&](const char* key) {
    try {
      return root[key].as<std::string>();
    } catch (const YAML::Exception&) {
      throw DataError(file, key, "is not a string");
    }
  };
  YoloSplit out;
  // names: [a, b] or {0: a, 1: b} (keys 0..nc-1, any order).
  const YAML::Node names = root["names"];
  if (!names || names.IsNull() || names.size() == 0)
    throw DataError(file, "names", "missing or empty: list the class names (a list, or a map from class id to name)");
  try {
    if (names.IsSequence()) {
      for (const auto& n : names) out.class_names.push_back(n.as<std::string>());
    } else if (names.IsMap()) {
      std::map<int64_t, std::string> by_id;
      for (const auto& kv : names) by_id[kv.first.as<int64_t>()] = kv.second.as<std::string>();
      int64_t expected = 0;
      for (const auto& [id, name] : by_id) {
        if (id != expected)
          throw DataError(file, "names",
                          "class " + std::to_string(expected) + " has no name (ids must be 0.." +
                              std::to_string(by_id.size() - 1) + ")");
        out.class_names.push_back(name), ++expected;
      }
    } else {
      throw DataError(file, "names", "is neither a list nor a map from class id to name");
    }
  } catch (const YAML::Exception&) {
    throw DataError(file, "names", "holds something that is not a class id and a name");
  }
  if (root["nc"] && !root["nc"].IsNull()) {
    int64_t nc = -1;
    try {
      nc = root["nc"].as<int64_t>();
    } catch (const YAML::Exception&) {
      throw DataError(file, "nc", "is not an integer");
    }
    if (nc != int64_t(out.class_names.size()))
      throw DataError(file, "nc", std::to_string(nc) + ", but names has " + std::to_string(out.class_names.size()));
  }
  const fs::path here = fs::path(file).parent_path();
  fs::path base = here;
  if (root["path"] && !root["path"].IsNull()) {
    const fs::path p = text("path");
    base = p.is_absolute() ? p : here / p;
  }
  const YAML::Node node = root[split];
  if (!node || node.IsNull())
    throw DataError(file, split, "missing: the " + split + " images (a directory relative to path)");
  if (!node.IsScalar())
    throw DataError(file, split, "is a list: give one image directory (prep writes one dataset per split)");
  const fs::path dir = (base / text(split.c_str())).lexically_normal();
  if (dir.extension() == ".txt")
    throw DataError(file, split, "'" + dir.string() + "' is an image list; prep reads an image directory");
  if (!fs::is_directory(dir)) throw DataError(file, split, "'" + dir.string() + "' is not a directory");
  out.images_dir = dir.string();
  // Ultralytics' img2label_paths: the last "images" component becomes "labels".
  std::vector<fs::path> parts(dir.begin(), dir.end());
  const auto last = std::find(parts.rbegin(), parts.rend(), fs::path("images"));
  if (last != parts.rend()) *last = "labels";
  fs::path labels;
  for (const auto& part : parts) labels /= part;
  out.labels_dir = labels.string();
  return out;
}

}  // namespace meridian::data
