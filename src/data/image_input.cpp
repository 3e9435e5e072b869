#include "meridian/data/image_input.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <opencv2/imgproc.hpp>

namespace fs = std::filesystem;

namespace meridian::data {

std::vector<std::string> list_images(const std::string& dir, const std::string& skip) {
  std::error_code ec;
  const fs::path skip_abs = skip.empty() ? fs::path() : fs::weakly_canonical(skip, ec);
  std::vector<std::string> images;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!skip.empty() && it->is_directory() && fs::weakly_canonical(it->path(), ec) == skip_abs) {
      it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file()) continue;
    std::string ext = it->path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
    if (ext == ".jpg" || ext == ".jpeg" || ext == ".png" || ext == ".tif" || ext == ".tiff" || ext == ".bmp")
      images.push_back(fs::relative(it->path(), dir).string());
  }
  if (ec) throw fs::filesystem_error("cannot list", dir, ec);
  std::sort(images.begin(), images.end());
  return images;
}

cv::Mat resize_crop(const cv::Mat& img, int size) {
  const double scale = double(size) / std::min(img.cols, img.rows);
  const int w = std::max(size, int(std::lround(img.cols * scale)));
  const int h = std::max(size, int(std::lround(img.rows * scale)));
  cv::Mat resized;
  if (w != img.cols || h != img.rows)
    cv::resize(img, resized, cv::Size(w, h), 0, 0, scale < 1 ? cv::INTER_AREA : cv::INTER_LINEAR);
  else
    resized = img;
  return resized(cv::Rect((w - size) / 2, (h - size) / 2, size, size)).clone();
}

Letterbox letterbox(const cv::Mat& rgb, int size) {
  Letterbox l;
  l.scale = double(size) / std::max(rgb.cols, rgb.rows);
  const int w = std::max(1, int(std::lround(rgb.cols * l.scale)));
  const int h = std::max(1, int(std::lround(rgb.rows * l.scale)));
  cv::Mat resized;
  cv::resize(rgb, resized, cv::Size(w, h), 0, 0, l.scale < 1 ? cv::INTER_AREA : cv::INTER_LINEAR);
  l.image = cv::Mat(size, size, CV_8UC3, cv::Scalar(114, 114, 114));
  l.pad_x = (size - w) / 2;
  l.pad_y = (size - h) / 2;
  resized.copyTo(l.image(cv::Rect(l.pad_x, l.pad_y, w, h)));
  return l;
}

bool place_box(const Letterbox& l, int size, std::array<float, 4>& box) {
  for (int k = 0; k < 4; ++k) {
    const double offset = (k % 2 == 0) ? l.pad_x : l.pad_y;
    box[k] = float(std::clamp(box[k] * l.scale + offset, 0.0, double(size)));
  }
  return box[2] - box[0] > 1e-3f && box[3] - box[1] > 1e-3f;
}

}  // namespace meridian::data
