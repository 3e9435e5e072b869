// COCO-style mean average precision for detection (the rules of pycocotools' COCOeval, bbox, area
// range "all", no crowd regions, no per-image detection cap: cap with batched_nms beforehand).
//
// For each class c and IoU threshold t in 0.50:0.05:0.95 (computed as numpy's linspace does):
//  * per image, the class's detections in descending score order (stable) are matched greedily:
//    each takes the still unmatched ground truth of class c with the highest IoU >= t (ties: the
//    lower ground-truth index), else it is a false positive;
//  * the detections of all images are ordered by descending score (stable: image order, then the
//    order within the image), cumulative TP/FP give recall = TP / #GT and precision = TP / (TP + FP)
//    (pycocotools adds 2^-52 to the denominator; here it is exact, so perfect predictions give 1.0);
//  * precision is made monotone (running max from the right) and sampled at the 101 recall points
//    0:0.01:1: at each point, the precision at the first recall >= the point, 0 when there is none;
//    AP = the mean of the 101 samples.
// A class with no ground truth has undefined AP (-1 in the per-class output) and is left out of the
// means; a class with ground truth but no detections has AP 0 and counts. Means are -1 when no class
// has ground truth. IoU is computed in double from float32 coordinates.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace meridian::detect {

struct MapResult {
  double map50 = -1.0;          // mean over classes with ground truth of AP at IoU 0.5
  double map50_95 = -1.0;       // mean over classes with ground truth of AP averaged over 0.50:0.05:0.95
  std::vector<double> ap50;     // [num_classes]; -1 for a class without ground truth
  std::vector<double> ap50_95;  // [num_classes]; -1 for a class without ground truth
  std::vector<int64_t> num_gt;  // [num_classes] ground-truth boxes per class
  int64_t num_images = 0;
};

// The 10 COCO IoU thresholds 0.50, 0.55, ..., 0.95 (numpy.linspace(.5, .95, 10) bit for bit).
std::vector<double> coco_iou_thresholds();

// Collects ground truth and detections image by image; compute() scores them. Images keep the order
// they were added in (which decides ties between equal scores, as in pycocotools).
struct MapAccumulator {
  // gt_boxes [G,4] xyxy, gt_classes [G] (integer, >= 0), det_boxes [D,4], det_scores [D] (finite),
  // det_classes [D] (integer, >= 0). Any device; copied to CPU (boxes and scores as float32).
  // std::invalid_argument (nothing added) for a wrong shape or dtype, a negative class or a
  // non-finite score.
  void add_image(const at::Tensor& gt_boxes, const at::Tensor& gt_classes, const at::Tensor& det_boxes,
                 const at::Tensor& det_scores, const at::Tensor& det_classes);

  // Scores classes 0..num_classes-1. std::invalid_argument when num_classes < 1 or a class id
  // (ground truth or detection) is >= num_classes.
  MapResult compute(int num_classes) const;

  // Every image as bytes (exact: raw float32/int64, host byte order, so for ranks of one job), to be
  // gathered to one rank and merged there.
  std::string serialize() const;
  // Appends the images of a serialize() string after this accumulator's own, in their order.
  // std::invalid_argument (nothing appended) for a string that is not a complete serialization.
  void merge(const std::string& bytes);

  int64_t num_images() const { return static_cast<int64_t>(images_.size()); }

  struct Image {
    std::vector<float> gt_boxes;  // 4 per box
    std::vector<int64_t> gt_classes;
    std::vector<float> det_boxes;  // 4 per box
    std::vector<float> det_scores;
    std::vector<int64_t> det_classes;
  };

 private:
  std::vector<Image> images_;
};

}  // namespace meridian::detect
