#include "yolo_reader.h"

#include <algorithm>
#include <cmath>
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

}  // namespace meridian::data
