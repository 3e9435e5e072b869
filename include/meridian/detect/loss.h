// Training loss and decoding of an anchor-free (YOLOv8/v12-style) detector head: anchor points,
// distance <-> box conversions, DFL, CIoU, the task-aligned assigner (YOLOv8's TaskAlignedAssigner)
// and the three-part loss (CIoU box, BCE class, DFL), plus decode + class-aware NMS for inference.
//
// Head output levels are [B, 4*reg_max + C, H, W] (see models/yolo.h): the first 4*reg_max channels
// are DFL logits, side-major (left, top, right, bottom; reg_max bins each) with distances in units
// of the level's stride, the remaining C channels class logits. Anchors are the cell centres,
// ordered level by level, row-major within a level (the order of level.view(B, no, H*W)).
// Boxes are xyxy in pixels unless said otherwise. Nothing here is collective; everything runs on
// the levels' device (decode's NMS runs on the CPU, see boxes.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace meridian::comm {
class Communicator;
}

namespace meridian::detect {

struct Anchors {
  at::Tensor points;   // [A, 2] float32 (x, y) cell centres in pixels: (index + offset) * stride
  at::Tensor strides;  // [A] float32 stride of each anchor's level
};

// Anchors of levels [B, *, H_l, W_l] with strides[l] (same count; std::invalid_argument otherwise),
// on levels[0]'s device.
Anchors make_anchors(const std::vector<at::Tensor>& levels, const std::vector<int64_t>& strides, double offset = 0.5);

// ltrb distances [..., 4] from points [..., 2] (broadcast) -> xyxy boxes [..., 4] (same unit).
at::Tensor dist2bbox(const at::Tensor& distances, const at::Tensor& points);
// xyxy boxes [..., 4] -> ltrb distances [..., 4] from points [..., 2], clamped to
// [0, max_distance - 0.01] (YOLOv8 passes reg_max - 1, so the right DFL bin floor(d) + 1 exists).
at::Tensor bbox2dist(const at::Tensor& points, const at::Tensor& boxes, double max_distance);
// DFL logits [..., 4*reg_max] -> expected distances [..., 4]: softmax over each side's reg_max
// bins, expectation with weights 0 .. reg_max-1. std::invalid_argument when the last dim is wrong.
at::Tensor dfl_decode(const at::Tensor& logits, int64_t reg_max);
// Distribution focal loss per box: logits [N, 4, reg_max], targets [N, 4] in [0, reg_max - 1]
// -> [N]: mean over the 4 sides of  -(wl * log p[floor t] + wr * log p[floor t + 1]),
// wl = floor t + 1 - t, wr = 1 - wl (so -log p[t] when t is an integer bin).
at::Tensor dfl_loss(const at::Tensor& logits, const at::Tensor& targets);

// Complete IoU of xyxy boxes a and b [..., 4] (broadcast) -> [...]:
// IoU - rho^2 / c^2 - alpha * v, rho = distance of the centres, c = diagonal of the enclosing box,
// v = 4/pi^2 (atan(w_b/h_b) - atan(w_a/h_a))^2, alpha = v / (v - IoU + 1 + eps) (no gradient
// through alpha, as YOLOv8). eps guards the divisions (heights, union, c^2).
at::Tensor ciou(const at::Tensor& a, const at::Tensor& b, double eps = 1e-7);

struct AssignerOptions {
  int64_t topk = 10;   // candidates per ground-truth box (fewer when there are fewer anchors)
  double alpha = 0.5;  // exponent of the class score in the alignment metric
  double beta = 6.0;   // exponent of the CIoU in the alignment metric
  double eps = 1e-9;   // an anchor centre must be more than eps inside a box to be its candidate
  // gt sides shorter than this are widened to it about the box centre when choosing candidates (not
  // for the targets); assign() widens only when > 0. detection_loss replaces a value < 0 by the
  // second level's stride (the first's with one level), as Ultralytics' TaskAlignedAssigner does
  // (16 for strides 8, 16, 32).
  double min_side = -1;
};

struct Assignment {
  at::Tensor foreground;      // [B, A] bool: the anchor has a target
  at::Tensor target_gt;       // [B, A] int64: index into the flat gt list, -1 for background
  at::Tensor target_classes;  // [B, A] int64: class of the target, -1 for background
  at::Tensor target_boxes;    // [B, A, 4] float32 pixels (zeros for background)
  at::Tensor target_scores;   // [B, A, C] float32: one-hot class * normalised alignment, 0 for background
};

// YOLOv8's task-aligned assignment. pred_scores [B, A, C] (sigmoid probabilities), pred_boxes
// [B, A, 4] (decoded, pixels), anchor_points [A, 2] pixels; ground truth as flat gt_boxes [M, 4]
// pixels xyxy, gt_classes [M] int64 in [0, C), gt_offsets [B + 1] int64 (image b owns rows
// offsets[b] .. offsets[b+1]-1). For each gt the candidates are the anchors whose centre is inside
// it (its sides widened to options.min_side when > 0); alignment = score_of_gt_class^alpha *
// max(CIoU, 0)^beta; the topk anchors by alignment (among candidates) become positives; an anchor
// positive for several gts goes to the gt with the highest CIoU among all gts it is a candidate of
// (Ultralytics' TaskAlignedAssigner, 8.4); target score = alignment / (max alignment of that gt) *
// (max CIoU of that gt) on the gt's class. No gradient flows (inputs are detached). std::invalid_argument on
// inconsistent shapes, offsets that do not cover M rows, or a class outside [0, C).
Assignment assign(const at::Tensor& pred_scores, const at::Tensor& pred_boxes, const at::Tensor& anchor_points,
                  const at::Tensor& gt_boxes, const at::Tensor& gt_classes, const at::Tensor& gt_offsets,
                  const AssignerOptions& options = {});

struct DetectionLossOptions {
  int64_t reg_max = 16;
  double box = 7.5;  // weight of the CIoU loss
  double cls = 0.5;  // weight of the BCE classification loss
  double dfl = 1.5;  // weight of the distribution focal loss
  AssignerOptions assigner;
};

struct DetectionLoss {
  at::Tensor total;          // scalar with gradient: (box + cls + dfl) * B, as ultralytics (see below)
  at::Tensor box, cls, dfl;  // scalars, weighted, detached (for logging)
};

// The YOLOv8 loss over head levels [B, 4*reg_max + C, H_l, W_l] with strides (8, 16, 32 for
// models::Yolo) and the ground truth of assign(). With S = max(sum of target scores, 1):
//   cls = sum over anchors and classes of BCE-with-logits(class logits, target scores) / S
//   box = sum over positives of (1 - CIoU(pred, target)) * target score / S   (in stride units)
//   dfl = sum over positives of dfl_loss * target score / S
// total = (options.box * box + options.cls * cls + options.dfl * dfl) * B: the batch-size factor
// is ultralytics' convention (its learning rates assume it); divide by B for a per-image mean.
// An image without gt boxes only contributes BCE against all-zero targets.
// With `comm` (collective: one allreduce of 2 numbers) S and B are the sums over all ranks, so the
// ranks' totals add up to the loss of the whole global batch however it is split (train.balance);
// box, cls and dfl are still logged with this rank's own S.
// std::invalid_argument when the levels do not have 4*reg_max + C (C >= 1) channels or shapes differ.
DetectionLoss detection_loss(const std::vector<at::Tensor>& levels, const std::vector<int64_t>& strides,
                             const at::Tensor& gt_boxes, const at::Tensor& gt_classes, const at::Tensor& gt_offsets,
                             const DetectionLossOptions& options = {}, comm::Communicator* comm = nullptr);

struct Detections {
  at::Tensor boxes;    // [K, 4] float32 xyxy pixels
  at::Tensor scores;   // [K] float32 sigmoid class probability
  at::Tensor classes;  // [K] int64
};

// Inference: per image, each anchor's best class (sigmoid) above conf_threshold, its box decoded
// by DFL, then class-aware batched_nms(iou_threshold, max_det). multi_label: every class above
// conf_threshold of an anchor is a candidate of its own (the anchor's box with that class and
// score), as Ultralytics' DetectionValidator (`yolo val`: non_max_suppression(multi_label=True));
// without it, as its predictor. Either way at most max_nms candidates, those of the highest scores,
// go to the NMS (Ultralytics' max_nms 30000). Returns one Detections per image, sorted by
// descending score. Runs without gradient.
std::vector<Detections> decode(const std::vector<at::Tensor>& levels, const std::vector<int64_t>& strides,
                               int64_t reg_max, double conf_threshold, double iou_threshold, int64_t max_det,
                               bool multi_label = false, int64_t max_nms = 30000);

}  // namespace meridian::detect
