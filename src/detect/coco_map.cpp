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

constexpr char kMagic[8] = {'M', 'D', 'M', 'A', 'P', '3', 0, 0};
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

std::vector<float> floats_to_vector(const at::Tensor& t, int64_t n, const char* what) {
  if (!t.defined() || t.dim() != 1 || t.size(0) != n || !at::isFloatingType(t.scalar_type()))
    throw std::invalid_argument(std::string("MapAccumulator::add_image: ") + what + " must be a floating [" +
                                std::to_string(n) + "] tensor, got " + shape_of(t));
  const at::Tensor c = t.to(at::kCPU, at::kFloat).contiguous();
  std::vector<float> v(c.data_ptr<float>(), c.data_ptr<float>() + n);
  for (float x : v)
    if (!std::isfinite(x))
      throw std::invalid_argument(std::string("MapAccumulator::add_image: ") + what + " is not finite");
  return v;
}

double box_area(const float* b) { return (double(b[2]) - b[0]) * (double(b[3]) - b[1]); }

// pycocotools' bbox IoU (maskUtils.iou): for a crowd region, intersection over the detection's area.
double coco_iou(const float* det, const float* gt, bool crowd) {
  if (!crowd) return iou_xyxy(det, gt);
  const double iw = std::min<double>(det[2], gt[2]) - std::max<double>(det[0], gt[0]);
  const double ih = std::min<double>(det[3], gt[3]) - std::max<double>(det[1], gt[1]);
  const double area = box_area(det);
  return iw > 0 && ih > 0 && area > 0 ? iw * ih / area : 0.0;
}

constexpr double kEps = 2.220446049250313e-16;  // numpy.spacing(1), pycocotools' precision denominator

// One image's detections of one class after evaluateImg at one area range: scores (descending),
// per threshold matched / ignored flags, and the count of non-ignored ground truth.
struct Evaluated {
  std::vector<float> scores;
  std::vector<std::vector<char>> matched, ignored;  // [threshold][detection]
  int64_t npig = 0;
};

// AP per threshold of one class at one area range from its images' evaluations (image order), -1
// when it has no non-ignored ground truth (accumulate()).
std::vector<double> accumulate(const std::vector<Evaluated>& evals, size_t thresholds,
                               const std::vector<double>& recall_points) {
  int64_t npig = 0;
  std::vector<float> scores;
  std::vector<std::vector<char>> matched(thresholds), ignored(thresholds);
  for (const auto& e : evals) {
    npig += e.npig;
    scores.insert(scores.end(), e.scores.begin(), e.scores.end());
    for (size_t t = 0; t < thresholds; ++t) {
      matched[t].insert(matched[t].end(), e.matched[t].begin(), e.matched[t].end());
      ignored[t].insert(ignored[t].end(), e.ignored[t].begin(), e.ignored[t].end());
    }
  }
  if (npig == 0) return std::vector<double>(thresholds, -1.0);
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return scores[x] > scores[y]; });
  std::vector<double> ap(thresholds);
  const size_t nd = order.size();
  for (size_t t = 0; t < thresholds; ++t) {
    std::vector<double> rc(nd), pr(nd);
    double tp = 0, fp = 0;
    for (size_t k = 0; k < nd; ++k) {
      const size_t d = order[k];
      if (!ignored[t][d]) (matched[t][d] ? tp : fp) += 1;
      rc[k] = tp / double(npig);
      pr[k] = tp / (fp + tp + kEps);
    }
    for (size_t k = nd; k-- > 1;) pr[k - 1] = std::max(pr[k - 1], pr[k]);
    double sum = 0.0;
    for (double r : recall_points) {
      const auto it = std::lower_bound(rc.begin(), rc.end(), r);
      if (it != rc.end()) sum += pr[size_t(it - rc.begin())];
    }
    ap[t] = sum / double(recall_points.size());
  }
  return ap;
}

// The mean of the defined values (-1 when there is none).
double mean_defined(const std::vector<double>& v) {
  double sum = 0;
  int64_t n = 0;
  for (double x : v)
    if (x > -1.0) sum += x, ++n;
  return n > 0 ? sum / double(n) : -1.0;
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
    if (bytes > 0) std::memcpy(data, s.data() + pos, bytes);  // an empty vector's data() may be null
    pos += bytes;
  }
};

}  // namespace

std::vector<double> coco_iou_thresholds() { return linspace(0.5, 0.95, 10); }

const std::vector<AreaRange>& coco_area_ranges() {
  static const std::vector<AreaRange> ranges{{"all", 0.0, 1e10},
                                             {"small", 0.0, 32.0 * 32.0},
                                             {"medium", 32.0 * 32.0, 96.0 * 96.0},
                                             {"large", 96.0 * 96.0, 1e10}};
  return ranges;
}

void MapAccumulator::add_image(const at::Tensor& gt_boxes, const at::Tensor& gt_classes, const at::Tensor& det_boxes,
                               const at::Tensor& det_scores, const at::Tensor& det_classes, const at::Tensor& gt_crowd,
                               const at::Tensor& gt_areas, int64_t image_id) {
  Image img;
  img.image_id = image_id;
  img.gt_boxes = boxes_to_vector(gt_boxes, "gt_boxes");
  const int64_t ng = gt_boxes.size(0);
  img.gt_classes = classes_to_vector(gt_classes, ng, "gt_classes");
  if (gt_crowd.defined()) {
    if (gt_crowd.dim() != 1 || gt_crowd.size(0) != ng || at::isFloatingType(gt_crowd.scalar_type()))
      throw std::invalid_argument("MapAccumulator::add_image: gt_crowd must be an integer or bool [" +
                                  std::to_string(ng) + "] tensor, got " + shape_of(gt_crowd));
    const at::Tensor c = gt_crowd.to(at::kCPU, at::kByte).ne(0).to(at::kByte).contiguous();
    img.gt_crowd.assign(c.data_ptr<uint8_t>(), c.data_ptr<uint8_t>() + ng);
  } else {
    img.gt_crowd.assign(size_t(ng), 0);
  }
  if (gt_areas.defined()) {
    img.gt_areas = floats_to_vector(gt_areas, ng, "gt_areas");
  } else {
    for (int64_t g = 0; g < ng; ++g) img.gt_areas.push_back(float(box_area(&img.gt_boxes[size_t(4 * g)])));
  }
  img.det_boxes = boxes_to_vector(det_boxes, "det_boxes");
  const int64_t nd = det_boxes.size(0);
  img.det_scores = floats_to_vector(det_scores, nd, "det_scores");
  img.det_classes = classes_to_vector(det_classes, nd, "det_classes");
  images_.push_back(std::move(img));
}

MapResult MapAccumulator::compute(int num_classes, int max_dets) const {
  if (num_classes < 1)
    throw std::invalid_argument("MapAccumulator::compute: num_classes must be >= 1, got " +
                                std::to_string(num_classes));
  if (max_dets < 1) throw std::invalid_argument("MapAccumulator::compute: max_dets must be >= 1");
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
  const auto& ranges = coco_area_ranges();

  MapResult r;
  r.num_images = num_images();
  r.num_gt.assign(nc, 0);
  for (const Image& img : images_)
    for (size_t g = 0; g < img.gt_classes.size(); ++g)
      if (!img.gt_crowd[g]) ++r.num_gt[size_t(img.gt_classes[g])];
  // COCOeval's image order (np.unique(imgIds): ascending id), which decides between equal scores on
  // different images; images of equal id keep the order they were added in.
  std::vector<size_t> image_order(images_.size());
  std::iota(image_order.begin(), image_order.end(), size_t{0});
  std::stable_sort(image_order.begin(), image_order.end(),
                   [&](size_t x, size_t y) { return images_[x].image_id < images_[y].image_id; });
  // ap[range][class][threshold]
  std::vector<std::vector<std::vector<double>>> ap(ranges.size(), std::vector<std::vector<double>>(nc));
  for (size_t c = 0; c < nc; ++c) {
    std::vector<std::vector<Evaluated>> per_range(ranges.size());
    for (size_t image : image_order) {
      const Image& img = images_[image];
      std::vector<size_t> gts, dets;
      for (size_t g = 0; g < img.gt_classes.size(); ++g)
        if (img.gt_classes[g] == int64_t(c)) gts.push_back(g);
      for (size_t d = 0; d < img.det_classes.size(); ++d)
        if (img.det_classes[d] == int64_t(c)) dets.push_back(d);
      if (gts.empty() && dets.empty()) continue;  // evaluateImg's None
      std::stable_sort(dets.begin(), dets.end(),
                       [&](size_t x, size_t y) { return img.det_scores[x] > img.det_scores[y]; });
      if (dets.size() > size_t(max_dets)) dets.resize(size_t(max_dets));
      for (size_t a = 0; a < ranges.size(); ++a) {
        const double lo = ranges[a].lo, hi = ranges[a].hi;
        auto ignored_gt = [&](size_t g) { return img.gt_crowd[g] || img.gt_areas[g] < lo || img.gt_areas[g] > hi; };
        std::vector<size_t> order = gts;  // non-ignored ground truth first
        std::stable_sort(order.begin(), order.end(),
                         [&](size_t x, size_t y) { return !ignored_gt(x) && ignored_gt(y); });
        const size_t G = order.size(), D = dets.size();
        std::vector<double> iou(D * G);
        for (size_t i = 0; i < D; ++i)
          for (size_t j = 0; j < G; ++j)
            iou[i * G + j] =
                coco_iou(&img.det_boxes[4 * dets[i]], &img.gt_boxes[4 * order[j]], img.gt_crowd[order[j]] != 0);
        Evaluated e;
        for (size_t d : dets) e.scores.push_back(img.det_scores[d]);
        for (size_t j = 0; j < G; ++j) e.npig += ignored_gt(order[j]) ? 0 : 1;
        e.matched.assign(nt, std::vector<char>(D, 0));
        e.ignored.assign(nt, std::vector<char>(D, 0));
        for (size_t t = 0; t < nt; ++t) {
          std::vector<char> gt_matched(G, 0);
          for (size_t i = 0; i < D; ++i) {
            double best = std::min(thresholds[t], 1.0 - 1e-10);
            long m = -1;
            for (size_t j = 0; j < G; ++j) {
              if (gt_matched[j] && !img.gt_crowd[order[j]]) continue;
              if (m > -1 && !ignored_gt(order[size_t(m)]) && ignored_gt(order[j])) break;
              if (iou[i * G + j] < best) continue;
              best = iou[i * G + j];
              m = long(j);
            }
            if (m > -1) {
              e.ignored[t][i] = ignored_gt(order[size_t(m)]);
              e.matched[t][i] = 1;
              gt_matched[size_t(m)] = 1;
            } else {
              const double area = box_area(&img.det_boxes[4 * dets[i]]);
              e.ignored[t][i] = area < lo || area > hi;
            }
          }
        }
        per_range[a].push_back(std::move(e));
      }
    }
    for (size_t a = 0; a < ranges.size(); ++a) ap[a][c] = accumulate(per_range[a], nt, recall_points);
  }
  // summarize(): means over the classes with an AP, per threshold choice and range.
  auto over_classes = [&](size_t a, int threshold) {  // threshold -1: the mean over the 10
    std::vector<double> v;
    for (size_t c = 0; c < nc; ++c) {
      const auto& t = ap[a][c];
      if (t.empty() || t[0] <= -1.0) continue;
      v.push_back(threshold < 0 ? std::accumulate(t.begin(), t.end(), 0.0) / double(t.size()) : t[size_t(threshold)]);
    }
    return mean_defined(v);
  };
  r.map50_95 = over_classes(0, -1), r.map50 = over_classes(0, 0), r.map75 = over_classes(0, 5);
  r.map_small = over_classes(1, -1), r.map_medium = over_classes(2, -1), r.map_large = over_classes(3, -1);
  r.ap50.assign(nc, -1.0);
  r.ap50_95.assign(nc, -1.0);
  for (size_t c = 0; c < nc; ++c) {
    const auto& t = ap[0][c];
    if (t.empty() || t[0] <= -1.0) continue;
    r.ap50[c] = t[0];
    r.ap50_95[c] = std::accumulate(t.begin(), t.end(), 0.0) / double(t.size());
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
    put(out, &img.image_id, 1);
    put(out, img.gt_boxes.data(), img.gt_boxes.size());
    put(out, img.gt_classes.data(), img.gt_classes.size());
    put(out, img.gt_crowd.data(), img.gt_crowd.size());
    put(out, img.gt_areas.data(), img.gt_areas.size());
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
    const uint64_t need = sizeof(int64_t) +  // the image id
                          counts[0] * (4 * sizeof(float) + sizeof(int64_t) + sizeof(uint8_t) + sizeof(float)) +
                          counts[1] * (4 * sizeof(float) + sizeof(float) + sizeof(int64_t));
    if (counts[0] > bytes.size() || counts[1] > bytes.size() || need > bytes.size() - rd.pos)
      throw std::invalid_argument("MapAccumulator::merge: truncated serialization (" + std::to_string(bytes.size()) +
                                  " bytes)");
    Image img;
    rd.get(&img.image_id, 1);
    img.gt_boxes.resize(4 * counts[0]);
    img.gt_classes.resize(counts[0]);
    img.gt_crowd.resize(counts[0]);
    img.gt_areas.resize(counts[0]);
    img.det_boxes.resize(4 * counts[1]);
    img.det_scores.resize(counts[1]);
    img.det_classes.resize(counts[1]);
    rd.get(img.gt_boxes.data(), img.gt_boxes.size());
    rd.get(img.gt_classes.data(), img.gt_classes.size());
    rd.get(img.gt_crowd.data(), img.gt_crowd.size());
    rd.get(img.gt_areas.data(), img.gt_areas.size());
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
