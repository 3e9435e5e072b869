#include "meridian/data/image_input.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <opencv2/imgproc.hpp>

#include "image_decode.h"
#include "meridian/core/error.h"
#include "meridian/core/json_file.h"

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
    if (ext == ".jpg" || ext == ".jpeg" || ext == ".png" || ext == ".tif" || ext == ".tiff" || ext == ".bmp" ||
        ext == ".ppm")
      images.push_back(fs::relative(it->path(), dir).string());
  }
  if (ec) throw fs::filesystem_error("cannot list", dir, ec);
  std::sort(images.begin(), images.end());
  return images;
}

ImageInputs image_inputs(const std::string& path, const std::string& command, const std::string& skip) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    const fs::path file(path);
    return {file.has_parent_path() ? file.parent_path().string() : ".", {file.filename().string()}};
  }
  if (!fs::is_directory(path, ec))
    throw UserError(command + ": --images " + path + " is neither an image file nor a directory");
  ImageInputs in{path, {}};
  try {
    in.names = list_images(path, skip);
  } catch (const fs::filesystem_error& e) {
    throw UserError(command + ": cannot list " + path + ": " + e.code().message());
  }
  if (in.names.empty())
    throw UserError(command + ": no images (.jpg, .jpeg, .png, .tif, .tiff, .bmp, .ppm) under " + path);
  return in;
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

Letterbox letterbox_geometry(int width, int height, int size) {
  Letterbox l;
  l.scale = double(size) / std::max(width, height);
  l.pad_x = (size - std::max(1, int(std::lround(width * l.scale)))) / 2;
  l.pad_y = (size - std::max(1, int(std::lround(height * l.scale)))) / 2;
  return l;
}

Letterbox letterbox(const cv::Mat& rgb, int size) {
  Letterbox l = letterbox_geometry(rgb.cols, rgb.rows, size);
  const int w = std::max(1, int(std::lround(rgb.cols * l.scale)));  // as letterbox_geometry's
  const int h = std::max(1, int(std::lround(rgb.rows * l.scale)));
  cv::Mat resized;
  cv::resize(rgb, resized, cv::Size(w, h), 0, 0, l.scale < 1 ? cv::INTER_AREA : cv::INTER_LINEAR);
  l.image = cv::Mat(size, size, CV_8UC3, cv::Scalar(114, 114, 114));
  resized.copyTo(l.image(cv::Rect(l.pad_x, l.pad_y, w, h)));
  return l;
}

std::array<float, 4> unplace_box(const Letterbox& l, int width, int height, const std::array<float, 4>& box) {
  std::array<float, 4> out;
  for (int k = 0; k < 4; ++k) {
    const double offset = (k % 2 == 0) ? l.pad_x : l.pad_y, limit = (k % 2 == 0) ? width : height;
    out[size_t(k)] = float(std::clamp((box[size_t(k)] - offset) / l.scale, 0.0, limit));
  }
  return out;
}

bool place_box(const Letterbox& l, int size, std::array<float, 4>& box) {
  for (int k = 0; k < 4; ++k) {
    const double offset = (k % 2 == 0) ? l.pad_x : l.pad_y;
    box[k] = float(std::clamp(box[k] * l.scale + offset, 0.0, double(size)));
  }
  return box[2] - box[0] > 1e-3f && box[3] - box[1] > 1e-3f;
}

ImageProcessing ImageProcessing::from_hf_file(const std::string& path) {
  const nlohmann::json j = read_json_object(path, "preprocessor config");
  ImageProcessing p;
  for (const char* flag : {"do_resize", "do_rescale", "do_normalize"})
    if (j.contains(flag) && !j.value(flag, true))
      throw DataError(path, flag, "is false; meridian resizes, rescales and normalises as SiglipImageProcessor");
  if (j.value("do_center_crop", false)) throw DataError(path, "do_center_crop", "a crop is not supported");
  if (j.contains("size")) {
    const auto& size = j["size"];
    if (!size.is_object() || !size.contains("height") || !size.contains("width") ||
        !size["height"].is_number_integer() || !size["width"].is_number_integer() || size["height"].get<int>() < 1 ||
        size["width"].get<int>() < 1)
      throw DataError(path, "size", "expected {\"height\": H, \"width\": W} in pixels");
    p.height = size["height"].get<int>();
    p.width = size["width"].get<int>();
  }
  if (j.contains("resample")) {
    if (!j["resample"].is_number_integer() || (j["resample"] != 0 && j["resample"] != 2 && j["resample"] != 3))
      throw DataError(path, "resample", "expected 0 (nearest), 2 (bilinear) or 3 (bicubic)");
    p.resample = j["resample"].get<int>();
  }
  if (j.contains("rescale_factor")) {
    if (!j["rescale_factor"].is_number() || j["rescale_factor"].get<double>() <= 0)
      throw DataError(path, "rescale_factor", "expected a positive number");
    p.rescale = j["rescale_factor"].get<double>();
  }
  for (const auto& [field, values] : {std::pair{"image_mean", &p.mean}, std::pair{"image_std", &p.std}}) {
    if (!j.contains(field)) continue;
    const auto& v = j[field];
    if (v.is_number()) {
      values->fill(v.get<double>());
    } else if (v.is_array() && v.size() == 3 && v[0].is_number() && v[1].is_number() && v[2].is_number()) {
      for (int c = 0; c < 3; ++c) (*values)[c] = v[c].get<double>();
    } else {
      throw DataError(path, field, "expected a number or three numbers (R, G, B)");
    }
  }
  for (double s : p.std)
    if (s <= 0) throw DataError(path, "image_std", "must be positive");
  return p;
}

at::Tensor model_pixels(const std::string& dir, const std::vector<std::string>& names, const ImageProcessing& p) {
  auto out = at::empty({int64_t(names.size()), 3, p.height, p.width}, at::kFloat);
  for (size_t i = 0; i < names.size(); ++i) {
    cv::Mat rgb;
    try {
      rgb = load_rgb(dir, names[i], {});
    } catch (const SkipImage& e) {
      throw DataError((fs::path(dir) / names[i]).string(), "image", e.reason);
    }
    if (!rgb.isContinuous()) rgb = rgb.clone();
    at::Tensor hwc = at::from_blob(rgb.data, {rgb.rows, rgb.cols, 3}, at::kByte);
    if (rgb.cols != p.width || rgb.rows != p.height) {
      // As SiglipImageProcessor (transformers' torchvision backend) resizes: torchvision's resize of the
      // uint8 image, antialiased for bilinear and bicubic (PIL's filters), by the same ATen kernels:
      // OpenCV's INTER_AREA and INTER_CUBIC differ from them by up to 16 grey levels.
      const auto nchw = hwc.permute({2, 0, 1}).unsqueeze(0).contiguous();  // [1, 3, h, w] uint8
      const std::vector<int64_t> size{p.height, p.width};
      const auto resized = p.resample == 0   ? at::upsample_nearest2d(nchw, size)
                           : p.resample == 2 ? at::_upsample_bilinear2d_aa(nchw, size, false)
                                             : at::_upsample_bicubic2d_aa(nchw, size, false);
      hwc = resized[0].permute({1, 2, 0});
    }
    hwc = hwc.to(at::kFloat);
    const auto mean = at::tensor({p.mean[0], p.mean[1], p.mean[2]}, at::kFloat);
    const auto std = at::tensor({p.std[0], p.std[1], p.std[2]}, at::kFloat);
    out[int64_t(i)].copy_(((hwc * p.rescale - mean) / std).permute({2, 0, 1}));
  }
  return out;
}

}  // namespace meridian::data
