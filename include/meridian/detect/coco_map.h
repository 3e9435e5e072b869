// Mean average precision for detection with the rules of pycocotools' COCOeval (iouType "bbox"):
// evaluateImg, accumulate and summarize, for every class and image:
//  * ground truth is ignored when it is a crowd region (iscrowd) or its area is outside the area
//    range (all [0, 1e10], small [0, 32^2], medium [32^2, 96^2], large [96^2, 1e10], ends inclusive);
//    ignored ground truth is ordered after the rest (stable);
//  * the class's detections of the image in descending score order (stable), at most max_dets (100);
//  * each detection in turn, for each IoU threshold t in 0.50:0.05:0.95 (numpy's linspace): the
//    ground truth with the highest IoU >= min(t, 1 - 1e-10), later ground truth winning ties,
//    skipping ground truth already matched unless it is a crowd region, and stopping at the ignored
//    ground truth once a non-ignored one is matched; a crowd region's IoU is the intersection over
//    the detection's area (it can match many detections). A detection matched to ignored ground
//    truth, or unmatched with its box area outside the range, is ignored;
//  * per class, the detections of all images (in ascending image id, as COCOeval's np.unique(imgIds);
//    equal ids in the order added) sorted by descending score (stable):
//    cumulative TP and FP (ignored ones count as neither), recall = TP / (non-ignored ground truth),
//    precision = TP / (TP + FP + 2^-52), made monotone from the right and sampled at the 101 recall
//    points 0:0.01:1 (the first recall >= the point; 0 past the last); AP = the mean of the samples.
// A class without non-ignored ground truth in a range has no AP there and is left out of that
// range's mean; a mean is -1 when no class has one. IoU and areas in double from float32 boxes.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace meridian::detect {

struct MapResult {
  // pycocotools' summarize() at maxDets 100: AP (0.50:0.95), AP50, AP75 over area "all", and AP
  // (0.50:0.95) over the small, medium and large ranges. Means over classes; -1 when undefined.
  double map50_95 = -1.0, map50 = -1.0, map75 = -1.0;
  double map_small = -1.0, map_medium = -1.0, map_large = -1.0;
  std::vector<double> ap50;     // [num_classes], area all; -1 for a class without (non-crowd) ground truth
  std::vector<double> ap50_95;  // [num_classes], area all; -1 likewise
  std::vector<int64_t> num_gt;  // [num_classes] ground-truth boxes per class, crowd regions not counted
  int64_t num_images = 0;
};

// The area ranges of COCOeval: all, small, medium, large (lower and upper bound, inclusive).
struct AreaRange {
  const char* name;
  double lo, hi;
};
const std::vector<AreaRange>& coco_area_ranges();

// The 10 COCO IoU thresholds 0.50, 0.55, ..., 0.95 (numpy.linspace(.5, .95, 10) bit for bit).
std::vector<double> coco_iou_thresholds();

// Collects ground truth and detections image by image; compute() scores them. compute() takes the
// images in ascending image id, those of equal id (e.g. all -1) in the order they were added: that
// order decides between equal scores on different images, as COCOeval's sorted imgIds do.
struct MapAccumulator {
  // gt_boxes [G,4] xyxy, gt_classes [G] (integer, >= 0), det_boxes [D,4], det_scores [D] (finite),
  // det_classes [D] (integer, >= 0); optional gt_crowd [G] (integer or bool, nonzero: an iscrowd
  // region) and gt_areas [G] (COCO's annotation area, e.g. of the segmentation; undefined: the box
  // areas); image_id: COCO's image id (-1: none). Boxes in the coordinates the areas are meant in
  // (COCO: original image pixels). Any device; copied to CPU (boxes, scores and areas as float32).
  // std::invalid_argument (nothing added) for a wrong shape or dtype, a negative class, a non-finite
  // score or area.
  void add_image(const at::Tensor& gt_boxes, const at::Tensor& gt_classes, const at::Tensor& det_boxes,
                 const at::Tensor& det_scores, const at::Tensor& det_classes, const at::Tensor& gt_crowd = {},
                 const at::Tensor& gt_areas = {}, int64_t image_id = -1);

  // Scores classes 0..num_classes-1 with at most max_dets detections per image and class (COCO's
  // maxDets, 100). std::invalid_argument when num_classes < 1, max_dets < 1 or a class id (ground
  // truth or detection) is >= num_classes.
  MapResult compute(int num_classes, int max_dets = 100) const;

  // Every image as bytes (exact: raw float32/int64, host byte order, so for ranks of one job), to be
  // gathered to one rank and merged there.
  std::string serialize() const;
  // Appends the images of a serialize() string after this accumulator's own, in their order.
  // std::invalid_argument (nothing appended) for a string that is not a complete serialization.
  void merge(const std::string& bytes);

  int64_t num_images() const { return static_cast<int64_t>(images_.size()); }

  struct Image {
    int64_t image_id = -1;
    std::vector<float> gt_boxes;  // 4 per box
    std::vector<int64_t> gt_classes;
    std::vector<uint8_t> gt_crowd;
    std::vector<float> gt_areas;
    std::vector<float> det_boxes;  // 4 per box
    std::vector<float> det_scores;
    std::vector<int64_t> det_classes;
  };

 private:
  std::vector<Image> images_;
};

}  // namespace meridian::detect
