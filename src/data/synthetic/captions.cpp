#include "captions.h"

#include <algorithm>
#include <cmath>

namespace meridian::data::synthetic {

std::string num(int k) {
  static const char* const kWords[] = {"no",    "one",   "two",  "three", "four",   "five",  "six",
                                       "seven", "eight", "nine", "ten",   "eleven", "twelve"};
  return k >= 0 && k <= 12 ? kWords[k] : std::to_string(k);
}

std::string count(int k, const std::string& one, const std::string& many) {
  return num(k) + " " + (k == 1 ? one : many);
}

std::string there_are(int k, const std::string& one, const std::string& many, const std::string& rest) {
  return (k == 1 ? "there is " : "there are ") + count(k, one, many) + " " + rest;
}

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += i + 1 == words.size() ? " and " : ", ";
    out += words[i];
  }
  return out;
}

std::string orientation(double angle) {
  double deg = std::fmod(angle * 180 / kPi, 180.0);
  if (deg < 0) deg += 180;
  if (deg < 22.5 || deg >= 157.5) return "horizontally";
  if (deg >= 67.5 && deg < 112.5) return "vertically";
  if (deg < 90) return "diagonally from the top left to the bottom right";
  return "diagonally from the top right to the bottom left";
}

std::string region(P p, int n) {
  static const char* const kNames[3][3] = {{"in the upper left", "at the top", "in the upper right"},
                                           {"on the left", "in the center", "on the right"},
                                           {"in the lower left", "at the bottom", "in the lower right"}};
  const int col = std::clamp(int(3 * p.x / n), 0, 2), row = std::clamp(int(3 * p.y / n), 0, 2);
  return kNames[row][col];
}

P centroid(const Ctx& c, int cls) {
  P sum(0, 0);
  int k = 0;
  for (size_t i = 0; i < c.out.boxes.size(); ++i) {
    if (c.out.box_classes[i] != cls) continue;
    const auto& b = c.out.boxes[i];
    sum += P((b[0] + b[2]) / 2, (b[1] + b[3]) / 2);
    ++k;
  }
  return k ? sum / k : P(c.n / 2.0, c.n / 2.0);
}

std::string majority(const std::vector<std::string>& names) {
  std::string best;
  int best_count = 0;
  for (const auto& a : names) {
    const int k = int(std::count(names.begin(), names.end(), a));
    if (k > best_count) best = a, best_count = k;
  }
  return best;
}

std::vector<std::string> unique_in_order(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const auto& a : names)
    if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
  return out;
}

std::string sentence(std::string s) {
  if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = char(s[0] - 'a' + 'A');
  if (s.empty() || s.back() != '.') s += '.';
  return s;
}

}  // namespace meridian::data::synthetic
