// Box-consistent augmentation: closed-form box coordinates for flips, affines and the mosaic
// placement, pixels that move with their boxes, the filtering rules, and determinism in the key.
#include "meridian/data/box_augment.h"

#include <gtest/gtest.h>

#include <opencv2/imgproc.hpp>

#include "meridian/data/synthetic.h"

namespace data = meridian::data;
using Boxes = std::vector<std::array<float, 4>>;

namespace {

cv::Mat gray(int w, int h) { return cv::Mat(h, w, CV_8UC3, cv::Scalar::all(data::kFillGray)); }

// A gray image with a solid rectangle of `colour` exactly under each box (pixel edges).
data::Labeled with_boxes(int w, int h, const Boxes& boxes, cv::Scalar colour = {255, 0, 0}) {
  data::Labeled l{gray(w, h), boxes, std::vector<int32_t>(boxes.size())};
  for (size_t i = 0; i < boxes.size(); ++i) {
    const auto& b = boxes[i];
    l.classes[i] = int32_t(i);
    l.image(cv::Rect(cv::Point(int(b[0]), int(b[1])), cv::Point(int(b[2]), int(b[3])))).setTo(colour);
  }
  return l;
}

// Mean RGB of the pixels fully inside `b` shrunk by `margin` (bilinear edges are blends).
cv::Scalar mean_inside(const cv::Mat& image, const std::array<float, 4>& b, int margin = 1) {
  const cv::Rect r(cv::Point(int(std::ceil(b[0])) + margin, int(std::ceil(b[1])) + margin),
                   cv::Point(int(std::floor(b[2])) - margin, int(std::floor(b[3])) - margin));
  EXPECT_GT(r.area(), 0);
  return cv::mean(image(r));
}

bool same_pixels(const cv::Mat& a, const cv::Mat& b) {
  return a.size() == b.size() && a.type() == b.type() && cv::countNonZero(cv::Mat(a != b).reshape(1)) == 0;
}

}  // namespace

TEST(BoxAugment, FlipMirrorsBoxesAndPixels) {
  const auto in = with_boxes(64, 48, {{3, 5, 10, 20}});
  const auto out = data::flip_horizontal(in);
  EXPECT_EQ(out.boxes, (Boxes{{54, 5, 61, 20}}));
  EXPECT_EQ(out.classes, in.classes);
  EXPECT_EQ(out.image.at<cv::Vec3b>(5, 60), cv::Vec3b(255, 0, 0));  // column 3 -> 64 - 1 - 3
  EXPECT_EQ(out.image.at<cv::Vec3b>(5, 53), cv::Vec3b(114, 114, 114));
  EXPECT_EQ(out.image.at<cv::Vec3b>(5, 54), cv::Vec3b(255, 0, 0));
  EXPECT_TRUE(same_pixels(data::flip_horizontal(out).image, in.image));
}

TEST(BoxAugment, IdentityAffineKeepsBoxesAndPixels) {
  const auto in = with_boxes(64, 64, {{3, 5, 10, 20}, {0, 0, 64, 64}, {20.5f, 30.25f, 41.75f, 50}});
  const auto out = data::warp_affine(in, data::affine_matrix(64, 64, 64, 1, 0, 0, 0), 64);
  EXPECT_EQ(out.boxes, in.boxes);
  EXPECT_EQ(out.classes, in.classes);
  EXPECT_TRUE(same_pixels(out.image, in.image));
}

TEST(BoxAugment, ScaleTwoAboutTheCentre) {
  // x -> 2 (x - 32) + 32 = 2x - 32.
  const auto in = with_boxes(64, 64, {{24, 24, 40, 40}, {20, 28, 30, 36}});
  const auto out = data::warp_affine(in, data::affine_matrix(64, 64, 64, 2, 0, 0, 0), 64);
  EXPECT_EQ(out.boxes, (Boxes{{16, 16, 48, 48}, {8, 24, 28, 40}}));
  const auto m = mean_inside(out.image, out.boxes[0]);
  EXPECT_NEAR(m[0], 255, 1);
  EXPECT_NEAR(m[1], 0, 1);
  // Output size different from the input's: centre to centre, x -> 2 (x - 32) + 16.
  const auto small = data::warp_affine(in, data::affine_matrix(64, 64, 32, 2, 0, 0, 0), 32);
  EXPECT_EQ(small.boxes, (Boxes{{0, 0, 32, 32}, {0, 8, 12, 24}}));
}

TEST(BoxAugment, TranslationClippingAndFilters) {
  // translate (0.25, -0.125) of 64: +16 px in x, -8 px in y.
  const auto m = data::affine_matrix(64, 64, 64, 1, 0, 0.25, -0.125);
  const auto in = with_boxes(64, 64,
                             {{10, 20, 30, 40},  // inside: moved
                              {40, 10, 60, 30},  // half pushed out: clipped to x = 64
                              {50, 30, 62, 50},  // 66..78: fully outside, dropped
                              {46, 30, 50, 50},  // 62..66: 2 px of 4 left, kept (w = 2)
                              {47, 30, 50, 50},  // 63..66: 1 px left, dropped (< 2 px)
                              {5, 50, 55, 52},   // 43 x 2 after clipping: aspect 21.5 > 20, dropped
                              {0, 4, 20, 60}});  // y -4..52 clipped at 0: 52 of 56 rows kept
  const auto out = data::warp_affine(in, m, 64);
  EXPECT_EQ(out.boxes, (Boxes{{26, 12, 46, 32}, {56, 2, 64, 22}, {62, 22, 64, 42}, {16, 0, 36, 52}}));
  EXPECT_EQ(out.classes, (std::vector<int32_t>{0, 1, 3, 6}));
  // A box that keeps less than 10% of its area is dropped even when the rest is large enough.
  const auto big = with_boxes(64, 64, {{0, 0, 64, 64}});
  const auto shifted = data::warp_affine(big, data::affine_matrix(64, 64, 64, 1, 0, 0.95, 0), 64);
  EXPECT_TRUE(shifted.boxes.empty()) << "3.2 px of 64 columns left (5%)";
  const auto kept = data::warp_affine(big, data::affine_matrix(64, 64, 64, 1, 0, 0.85, 0), 64);
  EXPECT_EQ(kept.boxes.size(), 1u) << "9.6 px of 64 columns left (15%)";
  // The pixels moved with the boxes.
  const auto c = mean_inside(out.image, out.boxes[0]);
  EXPECT_NEAR(c[0], 255, 1);
  EXPECT_NEAR(c[2], 0, 1);
  EXPECT_EQ(out.image.at<cv::Vec3b>(0, 0), cv::Vec3b(114, 114, 114)) << "uncovered pixels are filled with gray";
}

TEST(BoxAugment, ContentStaysUnderItsBoxThroughScaleAndRotation) {
  const auto in = with_boxes(64, 64, {{20, 24, 36, 40}}, {10, 200, 30});
  // scale 1.5, translate (0.1, -0.05): x -> 1.5 (x - 32) + 32 + 6.4, y -> 1.5 (y - 32) + 32 - 3.2.
  const auto out = data::warp_affine(in, data::affine_matrix(64, 64, 64, 1.5, 0, 0.1, -0.05), 64);
  ASSERT_EQ(out.boxes.size(), 1u);
  EXPECT_NEAR(out.boxes[0][0], 1.5 * (20 - 32) + 38.4, 1e-4);
  EXPECT_NEAR(out.boxes[0][1], 1.5 * (24 - 32) + 28.8, 1e-4);
  EXPECT_NEAR(out.boxes[0][2], 1.5 * (36 - 32) + 38.4, 1e-4);
  EXPECT_NEAR(out.boxes[0][3], 1.5 * (40 - 32) + 28.8, 1e-4);
  const auto m = mean_inside(out.image, out.boxes[0]);
  EXPECT_NEAR(m[0], 10, 1);
  EXPECT_NEAR(m[1], 200, 1);
  EXPECT_NEAR(m[2], 30, 1);
  // 90 degrees about the centre: a 16 x 8 box becomes 8 x 16, the content follows.
  const auto tall = with_boxes(64, 64, {{24, 28, 40, 36}}, {10, 200, 30});
  const auto rot = data::warp_affine(tall, data::affine_matrix(64, 64, 64, 1, 90, 0, 0), 64);
  ASSERT_EQ(rot.boxes.size(), 1u);
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(rot.boxes[0][k], (std::array<float, 4>{28, 24, 36, 40})[k], 1e-4);
  EXPECT_NEAR(mean_inside(rot.image, rot.boxes[0])[1], 200, 1);
}

TEST(BoxAugment, MosaicPlacesEachImageAtItsCornerWithItsBoxes) {
  std::array<data::Labeled, 4> parts;
  const cv::Scalar colours[4] = {{200, 0, 0}, {0, 200, 0}, {0, 0, 200}, {200, 200, 0}};
  for (int i = 0; i < 4; ++i) {
    parts[i] = data::Labeled{cv::Mat(32, 32, CV_8UC3, colours[i]), {{4, 6, 12, 14}}, {int32_t(10 + i)}};
  }
  // Centre (40, 24) on the 64 x 64 canvas. Part 0 ends at the centre: shifted by (8, -8) and cut at
  // y = 0; part 1 starts at x = 40: (40, -8), cut at y = 0 (and x = 64); part 2 (8, 24); part 3 (40, 24).
  const auto canvas = data::mosaic_place(parts, 32, 40, 24);
  EXPECT_EQ(canvas.image.size(), cv::Size(64, 64));
  EXPECT_EQ(canvas.boxes, (Boxes{{12, 0, 20, 6}, {44, 0, 52, 6}, {12, 30, 20, 38}, {44, 30, 52, 38}}));
  EXPECT_EQ(canvas.classes, (std::vector<int32_t>{10, 11, 12, 13}));
  EXPECT_EQ(canvas.image.at<cv::Vec3b>(10, 10), cv::Vec3b(200, 0, 0));
  EXPECT_EQ(canvas.image.at<cv::Vec3b>(10, 50), cv::Vec3b(0, 200, 0));
  EXPECT_EQ(canvas.image.at<cv::Vec3b>(30, 10), cv::Vec3b(0, 0, 200));
  EXPECT_EQ(canvas.image.at<cv::Vec3b>(50, 60), cv::Vec3b(200, 200, 0));
  EXPECT_EQ(canvas.image.at<cv::Vec3b>(60, 60), cv::Vec3b(114, 114, 114)) << "below part 3 (y >= 56)";
  EXPECT_EQ(canvas.image.at<cv::Vec3b>(30, 2), cv::Vec3b(114, 114, 114)) << "left of part 2 (x < 8)";
  EXPECT_EQ(canvas.image.at<cv::Vec3b>(60, 2), cv::Vec3b(114, 114, 114));

  // Centre (32, 32), then the affine of the canvas with scale 1 and no translation to 32 x 32: the
  // output is the canvas window [16, 48)^2, boxes shifted by -16; boxes near the centre survive.
  std::array<data::Labeled, 4> near;
  const Boxes near_boxes = {{20, 20, 28, 28}, {4, 20, 12, 28}, {20, 4, 28, 12}, {4, 4, 12, 12}};
  for (int i = 0; i < 4; ++i) near[i] = with_boxes(32, 32, {near_boxes[i]}, colours[i]);
  const auto c2 = data::mosaic_place(near, 32, 32, 32);
  const auto out = data::warp_affine(c2, data::affine_matrix(64, 64, 32, 1, 0, 0, 0), 32);
  EXPECT_EQ(out.boxes, (Boxes{{4, 4, 12, 12}, {20, 4, 28, 12}, {4, 20, 12, 28}, {20, 20, 28, 28}}));
  for (int i = 0; i < 4; ++i) {
    const auto m = mean_inside(out.image, out.boxes[i], 0);
    for (int ch = 0; ch < 3; ++ch) EXPECT_NEAR(m[ch], colours[i][ch], 0.5) << "part " << i << " channel " << ch;
  }
  EXPECT_THROW(data::mosaic_place(near, 32, 65, 32), std::invalid_argument);
}

TEST(BoxAugment, HsvJitterKeepsBoxesAndIsDeterministic) {
  const auto in = with_boxes(32, 32, {{4, 4, 20, 20}}, {40, 120, 200});
  const auto a = data::hsv_jitter(in, 0.015, 0.7, 0.4, 7);
  EXPECT_EQ(a.boxes, in.boxes);
  EXPECT_TRUE(same_pixels(a.image, data::hsv_jitter(in, 0.015, 0.7, 0.4, 7).image));
  EXPECT_FALSE(same_pixels(a.image, data::hsv_jitter(in, 0.015, 0.7, 0.4, 8).image));
  EXPECT_TRUE(same_pixels(data::hsv_jitter(in, 0, 0, 0, 7).image, in.image)) << "zero gains: untouched";
}

TEST(BoxAugment, PipelineIsDeterministicInTheKeyAndKeepsBoxesInside) {
  constexpr int S = 64;
  std::vector<data::Labeled> scenes;
  for (int i = 0; i < 4; ++i) {
    const auto s = data::make_synthetic_scene(5, i, S, 1);
    scenes.push_back({s.image, s.boxes, std::vector<int32_t>(s.box_classes.begin(), s.box_classes.end())});
  }
  const std::vector<data::Labeled> partners(scenes.begin() + 1, scenes.end());
  data::DetectionAugment a;
  a.enabled = true;
  a.mosaic_prob = 0.5;
  a.degrees = 10;
  const auto x = data::augment_detection(scenes[0], partners, a, S, 42);
  const auto y = data::augment_detection(scenes[0], partners, a, S, 42);
  EXPECT_TRUE(same_pixels(x.image, y.image));
  EXPECT_EQ(x.boxes, y.boxes);
  EXPECT_EQ(x.classes, y.classes);
  const auto z = data::augment_detection(scenes[0], partners, a, S, 43);
  EXPECT_FALSE(same_pixels(x.image, z.image));
  int mosaics = 0, boxes = 0;
  for (uint64_t key = 0; key < 40; ++key) {
    mosaics += data::wants_mosaic(a, key);
    const auto o = data::augment_detection(scenes[0], partners, a, S, key);
    ASSERT_EQ(o.image.size(), cv::Size(S, S));
    ASSERT_EQ(o.boxes.size(), o.classes.size());
    for (const auto& b : o.boxes) {
      ++boxes;
      EXPECT_GE(b[0], 0);
      EXPECT_GE(b[1], 0);
      EXPECT_LE(b[2], S);
      EXPECT_LE(b[3], S);
      EXPECT_GE(b[2] - b[0], data::kMinBoxSide);
      EXPECT_GE(b[3] - b[1], data::kMinBoxSide);
    }
  }
  EXPECT_GT(mosaics, 5);
  EXPECT_LT(mosaics, 35);
  EXPECT_GT(boxes, 0);
  // Disabled: the sample as is. A mosaic without partners is refused.
  const auto off = data::augment_detection(scenes[0], {}, data::DetectionAugment{}, S, 1);
  EXPECT_TRUE(same_pixels(off.image, scenes[0].image));
  EXPECT_EQ(off.boxes, scenes[0].boxes);
  a.mosaic_prob = 1;
  EXPECT_THROW(data::augment_detection(scenes[0], {}, a, S, 1), std::invalid_argument);
}
