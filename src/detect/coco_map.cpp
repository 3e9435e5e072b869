#include "meridian/detect/coco_map.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <utility>

#include "meridian/detect/boxes.h"

namespace meridian::detect {
namespace {

constexpr char kMagic[8] = {'M', 'D', 'M', 'A', 'P', '1', 0, 0};
constexpr int kRecallPoints = 101;

std::vector<float> boxes_to_vector(const at::Tensor& t, const char* what) {
  if (!t.defined() || t.dim() != 2 || t.size(1) != 4)
    throw std::invalid_argument(std::string("MapAccumulator::add_image: ") + what + " must be [N,4] xyxy, got " +
                                shape_of(t));
  const at::Tensor c = t.to(at::kCPU, at::kFloat).contiguous();
  const float* p = c.data_ptr<float>();
  return std::vector<float>(p, p + c.numel());
}

std::vector<int64_t> classes_to_vector(const at::Tensor& t, int64_t n, const char* what) {
  if (!t.defined() || t.dim() != 1 || t.size(0) != n)
    throw std::invalid_argument(std::string("MapAccumulator::add_image: ") + what + " must be [" + std::to_string(n) +
                                "], got " + shape_of(t));
  if (at::isFloatingType(t.scalar_type()) || t.scalar_type() == at::kBool)
    throw std::invalid_argument(std::string("MapAccumulator::add_image: ") + what + " must be an integer tensor");
  const at::Tensor c = t.to(at::kCPU, at::kLong).contiguous();
  const int64_t* p = c.data_ptr<int64_t>();
  std::vector<int64_t> v(p, p + c.numel());
  for (int64_t x : v)
    if (x < 0)
      throw std::invalid_argument(std::string("MapAccumulator::add_image: ") + what + " has a negative class " +
                                  std::to_string(x));
  return v;
}

// numpy.linspace(start, stop, num) bit for bit: start + i * ((stop - start) / (num - 1)), last = stop.
std::vector<double> linspace(double start, double stop, int num) {
  std::vector<double> v(static_cast<size_t>(num));
  const double step = (stop - start) / (num - 1);
  for (int i = 0; i < num; ++i) v[static_cast<size_t>(i)] = i * step + start;
  v.back() = stop;
  return v;
}

// AP from detections in global score order (tp flags), with num_gt > 0 ground truths.
double average_precision(const std::vector<char>& tp, int64_t num_gt, const std::vector<double>& recall_points) {
  const size_t nd = tp.size();
  std::vector<double> rc(nd), pr(nd);
  int64_t tps = 0, fps = 0;
  for (size_t k = 0; k < nd; ++k) {
    (tp[k] ? tps : fps) += 1;
    rc[k] = static_cast<double>(tps) / static_cast<double>(num_gt);
    pr[k] = static_cast<double>(tps) / static_cast<double>(tps + fps);
  }
  for (size_t k = nd; k-- > 1;) pr[k - 1] = std::max(pr[k - 1], pr[k]);
  double sum = 0.0;
  for (double r : recall_points) {
    const auto it = std::lower_bound(rc.begin(), rc.end(), r);
    if (it != rc.end()) sum += pr[static_cast<size_t>(it - rc.begin())];
  }
  return sum / static_cast<double>(recall_points.size());
}

template <typename T>
void put(std::string& out, const T* data, size_t count) {
  out.append(reinterpret_cast<const char*>(data), count * sizeof(T));
}

struct Reader {
  const std::string& s;
  size_t pos = 0;
  template <typename T>
  void get(T* data, size_t count) {
    const size_t bytes = count * sizeof(T);
    if (count > (s.size() - pos) / sizeof(T))
      throw std::invalid_argument("MapAccumulator::merge: truncated serialization (" + std::to_string(s.size()) +
                                  " bytes)");
    std::memcpy(data, s.data() + pos, bytes);
    pos += bytes;
  }
};

}  // namespace

std::vector<double> coco_iou_thresholds() { return linspace(0.5, 0.95, 10); }

void MapAccumulator::add_image(const at::Tensor& gt_boxes, const at::Tensor& gt_classes, const at::Tensor& det_boxes,
                               const at::Tensor& det_scores, const at::Tensor& det_classes) {
  Image img;
  img.gt_boxes = boxes_to_vector(gt_boxes, "gt_boxes");
  img.gt_classes = classes_to_vector(gt_classes, gt_boxes.size(0), "gt_classes");
  img.det_boxes = boxes_to_vector(det_boxes, "det_boxes");
  const int64_t nd = det_boxes.size(0);
  if (!det_scores.defined() || det_scores.dim() != 1 || det_scores.size(0) != nd ||
      !at::isFloatingType(det_scores.scalar_type()))
    throw std::invalid_argument("MapAccumulator::add_image: det_scores must be a floating [" + std::to_string(nd) +
                                "] tensor, got " + shape_of(det_scores));
  const at::Tensor s = det_scores.to(at::kCPU, at::kFloat).contiguous();
  img.det_scores.assign(s.data_ptr<float>(), s.data_ptr<float>() + nd);
  for (float x : img.det_scores)
    if (!std::isfinite(x)) throw std::invalid_argument("MapAccumulator::add_image: det_scores has a non-finite score");
  img.det_classes = classes_to_vector(det_classes, nd, "det_classes");
  images_.push_back(std::move(img));
}

MapResult MapAccumulator::compute(int num_classes) const {
  if (num_classes < 1)
    throw std::invalid_argument("MapAccumulator::compute: num_classes must be >= 1, got " +
                                std::to_string(num_classes));
  const size_t nc = static_cast<size_t>(num_classes);
  for (const Image& img : images_) {
    for (const auto* v : {&img.gt_classes, &img.det_classes})
      for (int64_t c : *v)
        if (c < 0 || c >= num_classes)
          throw std::invalid_argument("MapAccumulator::compute: class " + std::to_string(c) +
                                      " outside [0, num_classes = " + std::to_string(num_classes) + ")");
  }
  const std::vector<double> thresholds = coco_iou_thresholds();
  const std::vector<double> recall_points = linspace(0.0, 1.0, kRecallPoints);
  const size_t nt = thresholds.size();

  MapResult r;
  r.num_images = num_images();
  r.ap50.assign(nc, -1.0);
  r.ap50_95.assign(nc, -1.0);
  r.num_gt.assign(nc, 0);
  for (const Image& img : images_)
    for (int64_t c : img.gt_classes) ++r.num_gt[static_cast<size_t>(c)];

  for (size_t c = 0; c < nc; ++c) {
    if (r.num_gt[c] == 0) continue;
    // Detections of class c across images: score and one TP flag per threshold.
    std::vector<float> scores;
    std::vector<std::vector<char>> flags(nt);
    for (const Image& img : images_) {
      std::vector<size_t> gts, dets;
      for (size_t g = 0; g < img.gt_classes.size(); ++g)
        if (img.gt_classes[g] == static_cast<int64_t>(c)) gts.push_back(g);
      for (size_t d = 0; d < img.det_classes.size(); ++d)
        if (img.det_classes[d] == static_cast<int64_t>(c)) dets.push_back(d);
      if (dets.empty()) continue;
      std::stable_sort(dets.begin(), dets.end(),
                       [&](size_t x, size_t y) { return img.det_scores[x] > img.det_scores[y]; });
      std::vector<double> iou(dets.size() * gts.size());
      for (size_t i = 0; i < dets.size(); ++i)
        for (size_t j = 0; j < gts.size(); ++j)
          iou[i * gts.size() + j] = iou_xyxy(&img.det_boxes[4 * dets[i]], &img.gt_boxes[4 * gts[j]]);
      for (size_t i = 0; i < dets.size(); ++i) scores.push_back(img.det_scores[dets[i]]);
      for (size_t t = 0; t < nt; ++t) {
        const double thr = std::min(thresholds[t], 1.0 - 1e-10);  // as pycocotools
        std::vector<char> matched(gts.size(), 0);
        for (size_t i = 0; i < dets.size(); ++i) {
          double best = -1.0;
          size_t m = gts.size();
          for (size_t j = 0; j < gts.size(); ++j) {
            const double v = iou[i * gts.size() + j];
            if (!matched[j] && v >= thr && v > best) {
              best = v;
              m = j;
            }
          }
          if (m < gts.size()) matched[m] = 1;
          flags[t].push_back(m < gts.size() ? 1 : 0);
        }
      }
    }
    std::vector<size_t> order(scores.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return scores[x] > scores[y]; });
    double sum = 0.0;
    for (size_t t = 0; t < nt; ++t) {
      std::vector<char> tp(order.size());
      for (size_t k = 0; k < order.size(); ++k) tp[k] = flags[t][order[k]];
      const double ap = average_precision(tp, r.num_gt[c], recall_points);
      if (t == 0) r.ap50[c] = ap;
      sum += ap;
    }
    r.ap50_95[c] = sum / static_cast<double>(nt);
  }

  double s50 = 0.0, s5095 = 0.0;
  int64_t counted = 0;
  for (size_t c = 0; c < nc; ++c) {
    if (r.num_gt[c] == 0) continue;
    s50 += r.ap50[c];
    s5095 += r.ap50_95[c];
    ++counted;
  }
  if (counted > 0) {
    r.map50 = s50 / static_cast<double>(counted);
    r.map50_95 = s5095 / static_cast<double>(counted);
  }
  return r;
}

std::string MapAccumulator::serialize() const {
  std::string out;
  put(out, kMagic, sizeof(kMagic));
  const uint64_t n = images_.size();
  put(out, &n, 1);
  for (const Image& img : images_) {
    const uint64_t counts[2] = {img.gt_classes.size(), img.det_classes.size()};
    put(out, counts, 2);
    put(out, img.gt_boxes.data(), img.gt_boxes.size());
    put(out, img.gt_classes.data(), img.gt_classes.size());
    put(out, img.det_boxes.data(), img.det_boxes.size());
    put(out, img.det_scores.data(), img.det_scores.size());
    put(out, img.det_classes.data(), img.det_classes.size());
  }
  return out;
}

void MapAccumulator::merge(const std::string& bytes) {
  Reader rd{bytes};
  char magic[sizeof(kMagic)];
  rd.get(magic, sizeof(magic));
  if (std::memcmp(magic, kMagic, sizeof(kMagic)) != 0)
    throw std::invalid_argument("MapAccumulator::merge: not a MapAccumulator serialization (bad magic)");
  uint64_t n = 0;
  rd.get(&n, 1);
  std::vector<Image> added;
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t counts[2];
    rd.get(counts, 2);
    // Sizes are checked against the remaining bytes before anything is allocated.
    const uint64_t need = counts[0] * (4 * sizeof(float) + sizeof(int64_t)) +
                          counts[1] * (4 * sizeof(float) + sizeof(float) + sizeof(int64_t));
    if (counts[0] > bytes.size() || counts[1] > bytes.size() || need > bytes.size() - rd.pos)
      throw std::invalid_argument("MapAccumulator::merge: truncated serialization (" + std::to_string(bytes.size()) +
                                  " bytes)");
    Image img;
    img.gt_boxes.resize(4 * counts[0]);
    img.gt_classes.resize(counts[0]);
    img.det_boxes.resize(4 * counts[1]);
    img.det_scores.resize(counts[1]);
    img.det_classes.resize(counts[1]);
    rd.get(img.gt_boxes.data(), img.gt_boxes.size());
    rd.get(img.gt_classes.data(), img.gt_classes.size());
    rd.get(img.det_boxes.data(), img.det_boxes.size());
    rd.get(img.det_scores.data(), img.det_scores.size());
    rd.get(img.det_classes.data(), img.det_classes.size());
    added.push_back(std::move(img));
  }
  if (rd.pos != bytes.size())
    throw std::invalid_argument("MapAccumulator::merge: " + std::to_string(bytes.size() - rd.pos) +
                                " trailing bytes after the serialization");
  for (Image& img : added) images_.push_back(std::move(img));
}

}  // namespace meridian::detect
