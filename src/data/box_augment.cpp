#include "meridian/data/box_augment.h"

#include <algorithm>
#include <cmath>
#include <opencv2/imgproc.hpp>
#include <stdexcept>
#include <string>

#include "meridian/core/hash.h"

namespace meridian::data {

namespace {

constexpr double kPi = 3.14159265358979323846;

// Independent streams per stage, so that changing one setting does not shift the draws of another.
constexpr uint64_t kSaltMosaic = 0x6d6f73616963ull, kSaltCentre = 0x63656e747265ull, kSaltAffine = 0x6166666e65ull,
                   kSaltHsv = 0x687376ull, kSaltFlip = 0x666c6970ull;

uint64_t stream(uint64_t key, uint64_t salt) { return splitmix64(key ^ splitmix64(salt)); }
double uniform(uint64_t& s, double lo, double hi) { return lo + (hi - lo) * next_unit(s); }

void check_labeled(const Labeled& in, const char* what) {
  if (in.image.empty() || in.image.type() != CV_8UC3)
    throw std::invalid_argument(std::string(what) + ": the image must be a non-empty CV_8UC3 matrix");
  if (in.boxes.size() != in.classes.size())
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(in.boxes.size()) + " boxes but " +
                                std::to_string(in.classes.size()) + " classes");
}

}  // namespace

Labeled flip_horizontal(const Labeled& in) {
  check_labeled(in, "flip_horizontal");
  Labeled out;
  cv::flip(in.image, out.image, 1);
  const float w = float(in.image.cols);
  out.boxes.reserve(in.boxes.size());
  for (const auto& b : in.boxes) out.boxes.push_back({w - b[2], b[1], w - b[0], b[3]});
  out.classes = in.classes;
  return out;
}

Labeled hsv_jitter(const Labeled& in, double hsv_h, double hsv_s, double hsv_v, uint64_t key) {
  check_labeled(in, "hsv_jitter");
  Labeled out{cv::Mat(), in.boxes, in.classes};
  if (hsv_h == 0 && hsv_s == 0 && hsv_v == 0) {  // the HSV round trip is lossy: skip it
    out.image = in.image.clone();
    return out;
  }
  uint64_t s = stream(key, kSaltHsv);
  const double rh = 1 + uniform(s, -hsv_h, hsv_h), rs = 1 + uniform(s, -hsv_s, hsv_s),
               rv = 1 + uniform(s, -hsv_v, hsv_v);
  cv::Mat lut(1, 256, CV_8UC3);
  for (int x = 0; x < 256; ++x) {  // truncation as numpy's astype(uint8) in ultralytics' augment_hsv
    auto& e = lut.at<cv::Vec3b>(0, x);
    e[0] = uint8_t(int(std::fmod(std::max(0.0, x * rh), 180.0)));
    e[1] = uint8_t(int(std::clamp(x * rs, 0.0, 255.0)));
    e[2] = uint8_t(int(std::clamp(x * rv, 0.0, 255.0)));
  }
  cv::Mat hsv;
  cv::cvtColor(in.image, hsv, cv::COLOR_RGB2HSV);
  cv::LUT(hsv, lut, hsv);
  cv::cvtColor(hsv, out.image, cv::COLOR_HSV2RGB);
  return out;
}

cv::Matx23d affine_matrix(int in_width, int in_height, int out_size, double scale, double degrees, double translate_x,
                          double translate_y) {
  const double angle = degrees * kPi / 180;
  // sin(0) and cos(0) are exact, so without rotation the map is exact in binary floating point.
  const double a = scale * std::cos(angle), b = scale * std::sin(angle);
  const double cx = in_width / 2.0, cy = in_height / 2.0;
  const double tx = out_size / 2.0 + translate_x * out_size, ty = out_size / 2.0 + translate_y * out_size;
  return cv::Matx23d(a, b, tx - (a * cx + b * cy), -b, a, ty - (-b * cx + a * cy));
}

Labeled warp_affine(const Labeled& in, const cv::Matx23d& m, int out_size) {
  check_labeled(in, "warp_affine");
  if (out_size < 1) throw std::invalid_argument("warp_affine: out_size must be positive");
  Labeled out;
  // OpenCV maps pixel centres (pixel c at c); ours are edges (pixel c centred at c + 0.5).
  cv::Matx23d c = m;
  c(0, 2) += 0.5 * (m(0, 0) + m(0, 1)) - 0.5;
  c(1, 2) += 0.5 * (m(1, 0) + m(1, 1)) - 0.5;
  cv::warpAffine(in.image, out.image, cv::Mat(c), cv::Size(out_size, out_size), cv::INTER_LINEAR, cv::BORDER_CONSTANT,
                 cv::Scalar::all(kFillGray));
  const double lim = out_size;
  for (size_t i = 0; i < in.boxes.size(); ++i) {
    const auto& b = in.boxes[i];
    double x0 = 1e300, y0 = 1e300, x1 = -1e300, y1 = -1e300;
    for (int k = 0; k < 4; ++k) {
      const double x = b[k & 1 ? 2 : 0], y = b[k & 2 ? 3 : 1];
      const double u = m(0, 0) * x + m(0, 1) * y + m(0, 2), v = m(1, 0) * x + m(1, 1) * y + m(1, 2);
      x0 = std::min(x0, u), x1 = std::max(x1, u), y0 = std::min(y0, v), y1 = std::max(y1, v);
    }
    const double area = (x1 - x0) * (y1 - y0);
    x0 = std::clamp(x0, 0.0, lim), x1 = std::clamp(x1, 0.0, lim), y0 = std::clamp(y0, 0.0, lim),
    y1 = std::clamp(y1, 0.0, lim);
    const double w = x1 - x0, h = y1 - y0;
    if (w < kMinBoxSide || h < kMinBoxSide) continue;
    if (w * h < kMinAreaKept * area) continue;
    if (std::max(w / h, h / w) > kMaxAspect) continue;
    out.boxes.push_back({float(x0), float(y0), float(x1), float(y1)});
    out.classes.push_back(in.classes[i]);
  }
  return out;
}

Labeled random_affine(const Labeled& in, int out_size, double scale, double translate, double degrees, uint64_t key) {
  uint64_t s = stream(key, kSaltAffine);
  const double sc = uniform(s, 1 - scale, 1 + scale);
  const double deg = uniform(s, -degrees, degrees);
  const double tx = uniform(s, -translate, translate), ty = uniform(s, -translate, translate);
  return warp_affine(in, affine_matrix(in.image.cols, in.image.rows, out_size, sc, deg, tx, ty), out_size);
}

Labeled mosaic_place(const std::array<Labeled, 4>& parts, int size, int xc, int yc) {
  if (size < 1) throw std::invalid_argument("mosaic_place: size must be positive");
  if (xc < 0 || yc < 0 || xc > 2 * size || yc > 2 * size)
    throw std::invalid_argument("mosaic_place: the centre must lie on the canvas [0, 2 size]");
  const int S2 = 2 * size;
  Labeled out;
  out.image = cv::Mat(S2, S2, CV_8UC3, cv::Scalar::all(kFillGray));
  for (int i = 0; i < 4; ++i) {
    const Labeled& p = parts[i];
    check_labeled(p, "mosaic_place");
    const int w = p.image.cols, h = p.image.rows;
    // Canvas region [x1a, x2a) x [y1a, y2a) and the matching source region (YOLO's load_mosaic).
    int x1a, y1a, x2a, y2a;
    if (i == 0)
      x1a = std::max(xc - w, 0), y1a = std::max(yc - h, 0), x2a = xc, y2a = yc;
    else if (i == 1)
      x1a = xc, y1a = std::max(yc - h, 0), x2a = std::min(xc + w, S2), y2a = yc;
    else if (i == 2)
      x1a = std::max(xc - w, 0), y1a = yc, x2a = xc, y2a = std::min(yc + h, S2);
    else
      x1a = xc, y1a = yc, x2a = std::min(xc + w, S2), y2a = std::min(yc + h, S2);
    const int x1b = (i == 0 || i == 2) ? w - (x2a - x1a) : 0;
    const int y1b = (i == 0 || i == 1) ? h - (y2a - y1a) : 0;
    const int cw = x2a - x1a, ch = y2a - y1a;
    if (cw <= 0 || ch <= 0) continue;
    p.image(cv::Rect(x1b, y1b, cw, ch)).copyTo(out.image(cv::Rect(x1a, y1a, cw, ch)));
    const float padw = float(x1a - x1b), padh = float(y1a - y1b);
    for (size_t k = 0; k < p.boxes.size(); ++k) {
      const auto& b = p.boxes[k];
      const float bx0 = std::clamp(b[0] + padw, float(x1a), float(x2a)),
                  bx1 = std::clamp(b[2] + padw, float(x1a), float(x2a));
      const float by0 = std::clamp(b[1] + padh, float(y1a), float(y2a)),
                  by1 = std::clamp(b[3] + padh, float(y1a), float(y2a));
      if (bx1 <= bx0 || by1 <= by0) continue;
      out.boxes.push_back({bx0, by0, bx1, by1});
      out.classes.push_back(p.classes[k]);
    }
  }
  return out;
}

bool wants_mosaic(const DetectionAugment& a, uint64_t key) {
  if (!a.enabled || a.mosaic_prob <= 0) return false;
  uint64_t s = stream(key, kSaltMosaic);
  return next_unit(s) < a.mosaic_prob;
}

Labeled augment_detection(const Labeled& sample, const std::vector<Labeled>& partners, const DetectionAugment& a,
                          int size, uint64_t key) {
  check_labeled(sample, "augment_detection");
  if (!a.enabled) return Labeled{sample.image.clone(), sample.boxes, sample.classes};
  if (size < 1) throw std::invalid_argument("augment_detection: size must be positive");
  Labeled out;
  if (wants_mosaic(a, key)) {
    if (partners.size() != 3)
      throw std::invalid_argument("augment_detection: a mosaic needs 3 partner images, got " +
                                  std::to_string(partners.size()));
    uint64_t s = stream(key, kSaltCentre);
    const int lo = size / 2, hi = size + size / 2;
    const int xc = lo + int(next_unit(s) * (hi - lo + 1)), yc = lo + int(next_unit(s) * (hi - lo + 1));
    const auto canvas = mosaic_place({sample, partners[0], partners[1], partners[2]}, size, xc, yc);
    out = random_affine(canvas, size, a.scale, a.translate, a.degrees, key);
  } else {
    out = random_affine(sample, size, a.scale, a.translate, a.degrees, key);
  }
  out = hsv_jitter(out, a.hsv_h, a.hsv_s, a.hsv_v, key);
  uint64_t s = stream(key, kSaltFlip);
  if (next_unit(s) < a.flip_prob) out = flip_horizontal(out);
  return out;
}

}  // namespace meridian::data
