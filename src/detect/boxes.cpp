#include "meridian/detect/boxes.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace meridian::detect {

std::string shape_of(const at::Tensor& t) {
  if (!t.defined()) return "undefined";
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? "," : "") + std::to_string(t.size(i));
  return s + "]";
}

namespace {

void check_boxes(const at::Tensor& t, const char* what) {
  if (!t.defined() || t.dim() != 2 || t.size(1) != 4)
    throw std::invalid_argument(std::string(what) + ": expected a [N,4] xyxy tensor, got " + shape_of(t));
}

}  // namespace

double iou_xyxy(const float* a, const float* b) {
  const double ix1 = std::max<double>(a[0], b[0]), iy1 = std::max<double>(a[1], b[1]);
  const double ix2 = std::min<double>(a[2], b[2]), iy2 = std::min<double>(a[3], b[3]);
  const double inter = std::max(0.0, ix2 - ix1) * std::max(0.0, iy2 - iy1);
  const double area_a = (double(a[2]) - a[0]) * (double(a[3]) - a[1]);
  const double area_b = (double(b[2]) - b[0]) * (double(b[3]) - b[1]);
  const double uni = area_a + area_b - inter;
  return uni > 0.0 ? inter / uni : 0.0;
}

at::Tensor box_iou(const at::Tensor& a, const at::Tensor& b) {
  check_boxes(a, "box_iou: a");
  check_boxes(b, "box_iou: b");
  const auto device = a.device();
  const at::Tensor x = a.to(at::kCPU, at::kFloat).contiguous();
  const at::Tensor y = b.to(at::kCPU, at::kFloat).contiguous();
  const int64_t n = x.size(0), m = y.size(0);
  at::Tensor out = at::zeros({n, m}, at::TensorOptions().dtype(at::kFloat));
  const float* xp = x.data_ptr<float>();
  const float* yp = y.data_ptr<float>();
  float* op = out.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    const float* p = xp + 4 * i;
    const float area_p = (p[2] - p[0]) * (p[3] - p[1]);
    for (int64_t j = 0; j < m; ++j) {
      const float* q = yp + 4 * j;
      const float w = std::max(0.0f, std::min(p[2], q[2]) - std::max(p[0], q[0]));
      const float h = std::max(0.0f, std::min(p[3], q[3]) - std::max(p[1], q[1]));
      const float inter = w * h;
      const float uni = area_p + (q[2] - q[0]) * (q[3] - q[1]) - inter;
      op[i * m + j] = uni > 0.0f ? inter / uni : 0.0f;
    }
  }
  return out.to(device);
}

at::Tensor batched_nms(const at::Tensor& boxes, const at::Tensor& scores, const at::Tensor& classes,
                       double iou_threshold, int64_t max_detections) {
  check_boxes(boxes, "batched_nms: boxes");
  const int64_t n = boxes.size(0);
  if (!scores.defined() || scores.dim() != 1 || scores.size(0) != n)
    throw std::invalid_argument("batched_nms: scores must be [N] with N = " + std::to_string(n));
  if (!classes.defined() || classes.dim() != 1 || classes.size(0) != n)
    throw std::invalid_argument("batched_nms: classes must be [N] with N = " + std::to_string(n));
  if (at::isFloatingType(classes.scalar_type()) || classes.scalar_type() == at::kBool)
    throw std::invalid_argument("batched_nms: classes must be an integer tensor");
  const auto device = boxes.device();
  const at::Tensor b = boxes.to(at::kCPU, at::kFloat).contiguous();
  const at::Tensor s = scores.to(at::kCPU, at::kDouble).contiguous();
  const at::Tensor c = classes.to(at::kCPU, at::kLong).contiguous();
  const float* bp = b.data_ptr<float>();
  const double* sp = s.data_ptr<double>();
  const int64_t* cp = c.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    if (std::isnan(sp[i])) throw std::invalid_argument("batched_nms: score " + std::to_string(i) + " is NaN");

  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return sp[x] > sp[y]; });

  const size_t cap = max_detections < 0 ? order.size() : static_cast<size_t>(max_detections);
  std::vector<int64_t> keep;
  for (int64_t i : order) {
    if (keep.size() >= cap) break;
    bool suppressed = false;
    for (int64_t k : keep) {
      if (cp[k] == cp[i] && iou_xyxy(bp + 4 * k, bp + 4 * i) > iou_threshold) {
        suppressed = true;
        break;
      }
    }
    if (!suppressed) keep.push_back(i);
  }
  at::Tensor out = at::empty({static_cast<int64_t>(keep.size())}, at::TensorOptions().dtype(at::kLong));
  std::copy(keep.begin(), keep.end(), out.data_ptr<int64_t>());
  return out.to(device);
}

}  // namespace meridian::detect
