// Box geometry for detection: pairwise IoU and class-aware non-maximum suppression.
//
// Boxes are xyxy (x1, y1, x2, y2) with x2 >= x1 and y2 >= y1, in any unit; a box with zero area
// has IoU 0 with everything (including itself). No torchvision: both run on the CPU in plain code
// and tensors from other devices are copied there (results go back to the input's device).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace meridian::detect {

// A tensor's shape for messages: "[3,4]", "undefined" for an undefined tensor. Not collective.
std::string shape_of(const at::Tensor& t);

// IoU of two xyxy boxes given as 4 floats, in double; 0 when the union is empty. Not collective.
double iou_xyxy(const float* a, const float* b);

// Pairwise IoU of a [N,4] and b [M,4] (any floating or integer dtype) -> float32 [N,M] on a's
// device. Computed in float32. std::invalid_argument when a or b is not [*,4].
at::Tensor box_iou(const at::Tensor& a, const at::Tensor& b);

// Class-aware greedy NMS. boxes [N,4] xyxy, scores [N] (floating), classes [N] (integer).
// Candidates are visited by descending score, ties broken by lower index (stable). A candidate is
// kept unless its IoU with an already kept box OF THE SAME CLASS is strictly greater than
// iou_threshold (IoU == iou_threshold is kept); boxes of different classes never suppress each
// other. IoU here is computed in double from the float32 coordinates.
// Returns the kept indices (int64 [K], on boxes' device) in descending score order (ties by lower
// index), K <= max_detections; max_detections < 0 means no cap, 0 returns an empty tensor.
// std::invalid_argument for mismatched shapes, a non-integer classes tensor or a NaN score.
at::Tensor batched_nms(const at::Tensor& boxes, const at::Tensor& scores, const at::Tensor& classes,
                       double iou_threshold, int64_t max_detections);

}  // namespace meridian::detect
