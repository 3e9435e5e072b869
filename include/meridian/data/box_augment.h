// Box-consistent augmentation for detection (YOLO-style): mosaic, random affine, HSV jitter and
// horizontal flip move the pixels and the boxes together.
//
// Conventions: an image is a cv::Mat CV_8UC3 in RGB order; boxes are x_min, y_min, x_max, y_max in
// pixels with pixel-edge coordinates (a box covering columns 3..5 has x_min 3, x_max 6; pixel c
// covers [c, c + 1)). Geometric transforms are expressed in these edge coordinates; the pixels are
// resampled with the same map (the half-pixel offset to OpenCV's centre convention is applied), so
// a box keeps covering the same content.
//
// Randomness: every random function takes a uint64 key and draws from splitmix64 (meridian/core/hash.h),
// never from a global generator or std::*_distribution, so the same key gives the same output on every
// machine, thread and rank. All functions are pure and thread-safe; inputs are not modified.
#pragma once

#include <array>
#include <cstdint>
#include <opencv2/core.hpp>
#include <vector>

namespace meridian::data {

// One image and its boxes.
struct Labeled {
  cv::Mat image;                            // [H, W] CV_8UC3, RGB
  std::vector<std::array<float, 4>> boxes;  // [N] x_min, y_min, x_max, y_max, pixel edges
  std::vector<int32_t> classes;             // [N]
};

// The augmentation settings (ultralytics' defaults for the gains and ranges).
struct DetectionAugment {
  bool enabled = false;
  double mosaic_prob = 1.0;  // probability of a 4-image mosaic (else a plain random affine)
  double flip_prob = 0.5;    // horizontal flip
  double scale = 0.5;        // scale drawn uniformly in [1 - scale, 1 + scale]
  double translate = 0.1;    // translation drawn uniformly in [-translate, translate] x output size
  double degrees = 0;        // rotation drawn uniformly in [-degrees, degrees]
  double hsv_h = 0.015, hsv_s = 0.7, hsv_v = 0.4;  // HSV gains: channel x (1 + U(-g, g)); hue wraps
};

// The fill of pixels that no input covers (YOLO's gray).
inline constexpr int kFillGray = 114;

// Boxes whose clipped width or height is below this many pixels are dropped.
inline constexpr float kMinBoxSide = 2.0f;
// ... or whose clipped area is below this fraction of their transformed, unclipped area ...
inline constexpr float kMinAreaKept = 0.1f;
// ... or whose aspect ratio (longer / shorter side) is above this.
inline constexpr float kMaxAspect = 20.0f;

// Mirrors left-right: x -> W - x (x_min and x_max swap roles). Classes unchanged.
Labeled flip_horizontal(const Labeled& in);

// Multiplies H, S and V by 1 + U(-gain, gain) each (hue wraps around 180, S and V saturate), through
// a LUT in OpenCV's 8-bit HSV space. Boxes unchanged.
Labeled hsv_jitter(const Labeled& in, double hsv_h, double hsv_s, double hsv_v, uint64_t key);

// A 2x3 affine map in edge coordinates from an input of in_width x in_height to an output of
// out_size x out_size: the input centre moves to the origin, is rotated by `degrees`
// (counter-clockwise on screen, as cv::getRotationMatrix2D) and scaled by `scale`, then moved to
// (out_size / 2 + translate_x * out_size, out_size / 2 + translate_y * out_size).
// With scale 1, degrees 0, translate 0 and in = out size it is the identity.
cv::Matx23d affine_matrix(int in_width, int in_height, int out_size, double scale, double degrees, double translate_x,
                          double translate_y);

// Applies `m` (edge coordinates) to the image (bilinear, fill kFillGray) and to the boxes: the 4
// corners are mapped, their axis-aligned bounds taken and clipped to [0, out_size]; then boxes
// narrower or lower than kMinBoxSide, keeping less than kMinAreaKept of their unclipped area, or
// with an aspect ratio above kMaxAspect are dropped (as ultralytics' box_candidates).
Labeled warp_affine(const Labeled& in, const cv::Matx23d& m, int out_size);

// A random affine as YOLO's random_perspective (without shear/perspective): scale in
// [1 - scale, 1 + scale], rotation in [-degrees, degrees], translation in [-translate, translate]
// of out_size, about the input's centre; output out_size x out_size.
Labeled random_affine(const Labeled& in, int out_size, double scale, double translate, double degrees, uint64_t key);

// The mosaic canvas of YOLO's load_mosaic: a (2 size) x (2 size) gray canvas; parts[0] is placed
// with its bottom-right corner at the centre (xc, yc), parts[1] with its bottom-left, parts[2] with
// its top-right, parts[3] with its top-left; each at its own scale, cut by the canvas border. Boxes
// are shifted with their image and clipped to the part of it that is on the canvas; boxes left
// without area are dropped. Throws std::invalid_argument unless size > 0 and 0 <= xc, yc <= 2 size
// and every part is CV_8UC3 with as many classes as boxes.
Labeled mosaic_place(const std::array<Labeled, 4>& parts, int size, int xc, int yc);

// Whether augment_detection with `key` makes a mosaic (needs `partners`), so that a loader reads
// the 3 partner images only when they are used. False when !a.enabled.
bool wants_mosaic(const DetectionAugment& a, uint64_t key);

// The whole pipeline, YOLO's order: mosaic (with probability mosaic_prob: `sample` and the 3
// `partners` around a centre drawn in [size / 2, 3 size / 2], then a random affine of the canvas to
// size x size) or a plain random affine to size x size; then HSV jitter; then a horizontal flip with
// probability flip_prob. Deterministic in `key`. !a.enabled returns `sample` unchanged (a copy).
// Throws std::invalid_argument when a mosaic is drawn but `partners` does not hold 3 images.
Labeled augment_detection(const Labeled& sample, const std::vector<Labeled>& partners, const DetectionAugment& a,
                          int size, uint64_t key);

}  // namespace meridian::data
