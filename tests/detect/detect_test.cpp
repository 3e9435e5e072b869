// Detection evaluation: box IoU, class-aware NMS and COCO-style mAP against hand-computed values and
// against pycocotools' COCOeval (iouType bbox, through tests/detect/coco_reference.py) on random cases
// with crowd regions, the three area ranges, images past maxDets 100, tied scores (also across images
// whose ids are out of order: COCOeval takes images in id order), duplicate ground truth and a
// category without AP: mAP50-95, mAP50, AP75, AP small / medium / large and every class's AP50 and
// AP50-95 to 0.01 points (1e-4), the measured largest difference printed; and MapAccumulator
// serialize/merge (the image ids included).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "meridian/detect/boxes.h"
#include "meridian/detect/coco_map.h"

namespace meridian::detect {
namespace {

at::Tensor boxes(const std::vector<std::vector<float>>& rows) {
  at::Tensor t = at::zeros({static_cast<int64_t>(rows.size()), 4}, at::kFloat);
  for (size_t i = 0; i < rows.size(); ++i)
    for (int j = 0; j < 4; ++j) t[static_cast<int64_t>(i)][j] = rows[i][static_cast<size_t>(j)];
  return t;
}
at::Tensor floats(const std::vector<float>& v) {
  return at::tensor(at::ArrayRef<float>(v.data(), v.size()), at::kFloat).reshape({static_cast<int64_t>(v.size())});
}
at::Tensor longs(const std::vector<int64_t>& v) {
  return at::tensor(at::ArrayRef<int64_t>(v.data(), v.size()), at::kLong).reshape({static_cast<int64_t>(v.size())});
}
std::vector<int64_t> to_vec(const at::Tensor& t) {
  EXPECT_EQ(t.scalar_type(), at::kLong);
  EXPECT_EQ(t.dim(), 1);
  const at::Tensor c = t.contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

// ---------------------------------------------------------------- box_iou

TEST(BoxIou, HandMadeBoxes) {
  const at::Tensor a = boxes({{0, 0, 10, 10}, {0, 0, 2, 2}});
  const at::Tensor b = boxes({{0, 0, 10, 10}, {20, 20, 30, 30}, {0, 0, 10, 5}, {1, 0, 3, 2}});
  const at::Tensor iou = box_iou(a, b);
  ASSERT_EQ(iou.sizes(), (at::IntArrayRef{2, 4}));
  EXPECT_EQ(iou.scalar_type(), at::kFloat);
  EXPECT_FLOAT_EQ(iou[0][0].item<float>(), 1.0f);  // identical
  EXPECT_FLOAT_EQ(iou[0][1].item<float>(), 0.0f);  // disjoint
  EXPECT_FLOAT_EQ(iou[0][2].item<float>(), 0.5f);  // lower half: 50 / 100
  // [0,0,2,2] vs [1,0,3,2]: shifted by half the width -> inter 2, union 4 + 4 - 2 = 6 -> 1/3.
  EXPECT_FLOAT_EQ(iou[1][3].item<float>(), 1.0f / 3.0f);
  // Touching edges only: zero-area intersection.
  EXPECT_FLOAT_EQ(box_iou(boxes({{0, 0, 1, 1}}), boxes({{1, 0, 2, 1}}))[0][0].item<float>(), 0.0f);
  // Empty inputs give empty matrices of the right shape.
  EXPECT_EQ(box_iou(at::zeros({0, 4}), b).sizes(), (at::IntArrayRef{0, 4}));
  EXPECT_EQ(box_iou(a, at::zeros({0, 4})).sizes(), (at::IntArrayRef{2, 0}));
  EXPECT_THROW(box_iou(at::zeros({3, 5}), b), std::invalid_argument);
}

// ---------------------------------------------------------------- batched_nms

TEST(BatchedNms, OverlappingSameClassSuppressed) {
  // 0 and 1 overlap with IoU 90/110 = 0.82; 2 is far away.
  const at::Tensor b = boxes({{0, 0, 10, 10}, {1, 0, 11, 10}, {50, 50, 60, 60}});
  EXPECT_EQ(to_vec(batched_nms(b, floats({0.9f, 0.8f, 0.7f}), longs({0, 0, 0}), 0.5, 100)),
            (std::vector<int64_t>{0, 2}));
  // The higher score wins whatever the index.
  EXPECT_EQ(to_vec(batched_nms(b, floats({0.6f, 0.8f, 0.7f}), longs({0, 0, 0}), 0.5, 100)),
            (std::vector<int64_t>{1, 2}));
  // A suppressed box does not suppress others: 0 suppresses 1; 2 overlaps only 1 -> kept.
  const at::Tensor chain = boxes({{0, 0, 10, 10}, {4, 0, 14, 10}, {8, 0, 18, 10}});
  EXPECT_EQ(to_vec(batched_nms(chain, floats({0.9f, 0.8f, 0.7f}), longs({1, 1, 1}), 0.3, 100)),
            (std::vector<int64_t>{0, 2}));
}

TEST(BatchedNms, DifferentClassesNeverSuppress) {
  const at::Tensor b = boxes({{0, 0, 10, 10}, {0, 0, 10, 10}, {1, 0, 11, 10}});
  EXPECT_EQ(to_vec(batched_nms(b, floats({0.9f, 0.8f, 0.7f}), longs({0, 1, 2}), 0.5, 100)),
            (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(to_vec(batched_nms(b, floats({0.9f, 0.8f, 0.7f}), longs({0, 1, 0}), 0.5, 100)),
            (std::vector<int64_t>{0, 1}));
}

TEST(BatchedNms, ThresholdBoundaryEqualIouIsKept) {
  // IoU([0,0,10,10], [0,0,10,5]) = 0.5 exactly: suppression needs IoU > threshold.
  const at::Tensor b = boxes({{0, 0, 10, 10}, {0, 0, 10, 5}});
  EXPECT_EQ(to_vec(batched_nms(b, floats({0.9f, 0.8f}), longs({3, 3}), 0.5, 100)), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(to_vec(batched_nms(b, floats({0.9f, 0.8f}), longs({3, 3}), 0.49, 100)), (std::vector<int64_t>{0}));
}

TEST(BatchedNms, MaxDetectionsCap) {
  const at::Tensor b = boxes({{0, 0, 1, 1}, {10, 0, 11, 1}, {20, 0, 21, 1}, {30, 0, 31, 1}, {40, 0, 41, 1}});
  const at::Tensor s = floats({0.1f, 0.5f, 0.3f, 0.9f, 0.2f});
  const at::Tensor c = longs({0, 0, 1, 1, 0});
  EXPECT_EQ(to_vec(batched_nms(b, s, c, 0.5, 3)), (std::vector<int64_t>{3, 1, 2}));
  EXPECT_EQ(to_vec(batched_nms(b, s, c, 0.5, 0)), (std::vector<int64_t>{}));
  EXPECT_EQ(to_vec(batched_nms(b, s, c, 0.5, -1)), (std::vector<int64_t>{3, 1, 2, 4, 0}));
  // The cap counts kept boxes, not candidates: the suppressed one does not use a slot.
  const at::Tensor b2 = boxes({{0, 0, 10, 10}, {0, 0, 10, 10}, {50, 0, 60, 10}});
  EXPECT_EQ(to_vec(batched_nms(b2, floats({0.9f, 0.8f, 0.7f}), longs({0, 0, 0}), 0.5, 2)),
            (std::vector<int64_t>{0, 2}));
}

TEST(BatchedNms, TiesBrokenByLowerIndex) {
  const at::Tensor b = boxes({{0, 0, 1, 1}, {10, 0, 11, 1}, {20, 0, 21, 1}, {30, 0, 31, 1}});
  EXPECT_EQ(to_vec(batched_nms(b, floats({0.5f, 0.7f, 0.5f, 0.7f}), longs({0, 0, 0, 0}), 0.5, 100)),
            (std::vector<int64_t>{1, 3, 0, 2}));
  // Identical boxes with equal scores: the lower index survives.
  const at::Tensor same = boxes({{5, 5, 9, 9}, {0, 0, 4, 4}, {5, 5, 9, 9}, {0, 0, 4, 4}});
  EXPECT_EQ(to_vec(batched_nms(same, floats({0.5f, 0.5f, 0.5f, 0.5f}), longs({0, 0, 0, 0}), 0.5, 100)),
            (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(to_vec(batched_nms(same, floats({0.5f, 0.5f, 0.5f, 0.5f}), longs({0, 0, 0, 0}), 0.5, 1)),
            (std::vector<int64_t>{0}));
}

TEST(BatchedNms, EmptyInputAndErrors) {
  const at::Tensor k = batched_nms(at::zeros({0, 4}), at::zeros({0}), at::zeros({0}, at::kLong), 0.5, 10);
  EXPECT_EQ(k.scalar_type(), at::kLong);
  EXPECT_EQ(k.numel(), 0);
  const at::Tensor b = boxes({{0, 0, 1, 1}});
  EXPECT_THROW(batched_nms(b, floats({0.1f, 0.2f}), longs({0}), 0.5, 10), std::invalid_argument);
  EXPECT_THROW(batched_nms(b, floats({0.1f}), floats({0.0f}), 0.5, 10), std::invalid_argument);
  EXPECT_THROW(batched_nms(b, floats({NAN}), longs({0}), 0.5, 10), std::invalid_argument);
  EXPECT_THROW(batched_nms(at::zeros({1, 3}), floats({0.1f}), longs({0}), 0.5, 10), std::invalid_argument);
}

// ---------------------------------------------------------------- COCO mAP

TEST(CocoMap, IouThresholdsAreCocos) {
  const std::vector<double> t = coco_iou_thresholds();
  ASSERT_EQ(t.size(), 10u);
  EXPECT_EQ(t.front(), 0.5);
  EXPECT_EQ(t.back(), 0.95);
  for (size_t i = 0; i < t.size(); ++i) EXPECT_NEAR(t[i], 0.5 + 0.05 * static_cast<double>(i), 1e-12);
}

TEST(CocoMap, PerfectPredictionsScoreOne) {
  MapAccumulator acc;
  const at::Tensor g1 = boxes({{0, 0, 10, 10}, {20, 20, 40, 30}, {5, 5, 15, 25}});
  acc.add_image(g1, longs({0, 1, 0}), g1, floats({0.9f, 0.8f, 0.7f}), longs({0, 1, 0}));
  const at::Tensor g2 = boxes({{1, 1, 3, 3}});
  acc.add_image(g2, longs({1}), g2, floats({0.95f}), longs({1}));
  const MapResult r = acc.compute(2);
  EXPECT_DOUBLE_EQ(r.map50, 1.0);
  EXPECT_DOUBLE_EQ(r.map50_95, 1.0);
  EXPECT_DOUBLE_EQ(r.ap50[0], 1.0);
  EXPECT_DOUBLE_EQ(r.ap50[1], 1.0);
  EXPECT_EQ(r.num_gt, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(r.num_images, 2);
}

TEST(CocoMap, ShiftedBoxesPassOnlyTheFirstThreshold) {
  // Every detection is its ground truth shifted right by 3 of 10: IoU = 70 / (100 + 100 - 70) = 7/13
  // = 0.538, in [0.50, 0.55): a TP at IoU 0.50 (AP 1), an FP at the 9 other thresholds (AP 0).
  // mAP@0.5 = 1; mAP@0.5:0.95 = (1 + 9 * 0) / 10 = 0.1.
  MapAccumulator acc;
  acc.add_image(boxes({{0, 0, 10, 10}, {100, 0, 110, 10}}), longs({0, 1}), boxes({{3, 0, 13, 10}, {103, 0, 113, 10}}),
                floats({0.9f, 0.6f}), longs({0, 1}));
  acc.add_image(boxes({{0, 50, 10, 60}}), longs({0}), boxes({{3, 50, 13, 60}}), floats({0.8f}), longs({0}));
  const MapResult r = acc.compute(2);
  EXPECT_DOUBLE_EQ(r.map50, 1.0);
  EXPECT_DOUBLE_EQ(r.map50_95, 0.1);
  EXPECT_DOUBLE_EQ(r.ap50_95[0], 0.1);
  EXPECT_DOUBLE_EQ(r.ap50_95[1], 0.1);
}

TEST(CocoMap, DuplicateDetectionIsAFalsePositive) {
  // 2 GT (A, B). Detections by score: D1 = A (TP), D2 = A again (FP: A is taken, IoU(A, B) = 0),
  // D3 = B (TP).
  //   after D1: recall 1/2, precision 1/1;  after D2: recall 1/2, precision 1/2;
  //   after D3: recall 2/2, precision 2/3.
  // Monotone precision (max from the right): [1, 2/3, 2/3].
  // 101-point grid: recall points 0.00..0.50 (51 points) -> first recall >= point is D1 -> 1;
  // points 0.51..1.00 (50 points) -> D3 -> 2/3.
  // AP = (51 * 1 + 50 * 2/3) / 101 = (153/3 + 100/3) / 101 = 253/303 = 0.83498...
  // IoUs are all 1 or 0, so every threshold gives the same AP: mAP@0.5:0.95 = 253/303 as well.
  MapAccumulator acc;
  acc.add_image(boxes({{0, 0, 10, 10}, {20, 0, 30, 10}}), longs({0, 0}),
                boxes({{20, 0, 30, 10}, {0, 0, 10, 10}, {0, 0, 10, 10}}), floats({0.7f, 0.9f, 0.8f}), longs({0, 0, 0}));
  const MapResult r = acc.compute(1);
  EXPECT_NEAR(r.ap50[0], 253.0 / 303.0, 1e-12);
  EXPECT_NEAR(r.map50, 253.0 / 303.0, 1e-12);
  EXPECT_NEAR(r.map50_95, 253.0 / 303.0, 1e-12);
}

TEST(CocoMap, DetectionMatchesTheHighestIouGroundTruth) {
  // GT A = [0,0,10,10], B = [3,0,13,10]. D1 (0.9) = B exactly: IoU 1 with B, 7/13 = 0.538 with A.
  // D2 (0.8) = [-3,0,7,10]: IoU 7/13 with A, 40/160 = 0.25 with B.
  // At IoU 0.5, D1 takes its best GT (B), leaving A for D2: both TP -> AP@0.5 = 1. (Taking the first
  // GT above the threshold, A, would make D2 an FP.)
  MapAccumulator acc;
  acc.add_image(boxes({{0, 0, 10, 10}, {3, 0, 13, 10}}), longs({0, 0}), boxes({{3, 0, 13, 10}, {-3, 0, 7, 10}}),
                floats({0.9f, 0.8f}), longs({0, 0}));
  const MapResult r = acc.compute(1);
  EXPECT_DOUBLE_EQ(r.map50, 1.0);
  // Above 0.538 only D1 is a TP: recall 1/2 at precision 1, then an FP -> 51 of 101 points at 1.
  // mAP@0.5:0.95 = (1 + 9 * 51/101) / 10.
  EXPECT_NEAR(r.map50_95, (1.0 + 9.0 * 51.0 / 101.0) / 10.0, 1e-12);
}

TEST(CocoMap, ClassWithGroundTruthButNoDetectionsCountsAsZero) {
  MapAccumulator acc;
  acc.add_image(boxes({{0, 0, 10, 10}, {20, 0, 30, 10}}), longs({0, 1}), boxes({{0, 0, 10, 10}}), floats({0.9f}),
                longs({0}));
  const MapResult r = acc.compute(2);
  EXPECT_DOUBLE_EQ(r.ap50[0], 1.0);
  EXPECT_DOUBLE_EQ(r.ap50[1], 0.0);
  EXPECT_DOUBLE_EQ(r.ap50_95[1], 0.0);
  EXPECT_DOUBLE_EQ(r.map50, 0.5);
  EXPECT_DOUBLE_EQ(r.map50_95, 0.5);
}

TEST(CocoMap, ClassWithDetectionsButNoGroundTruthIsExcluded) {
  MapAccumulator acc;
  acc.add_image(boxes({{0, 0, 10, 10}}), longs({0}), boxes({{0, 0, 10, 10}, {50, 50, 60, 60}}), floats({0.9f, 0.95f}),
                longs({0, 2}));
  const MapResult r = acc.compute(3);
  EXPECT_DOUBLE_EQ(r.ap50[0], 1.0);
  EXPECT_DOUBLE_EQ(r.ap50[1], -1.0);  // nothing at all
  EXPECT_DOUBLE_EQ(r.ap50[2], -1.0);  // detections only
  EXPECT_DOUBLE_EQ(r.ap50_95[2], -1.0);
  EXPECT_DOUBLE_EQ(r.map50, 1.0);
  EXPECT_DOUBLE_EQ(r.map50_95, 1.0);
  EXPECT_EQ(r.num_gt, (std::vector<int64_t>{1, 0, 0}));
}

TEST(CocoMap, EqualScoresOnDifferentImagesGoInImageIdOrder) {
  // One ground truth, on image A; a hit on it (A) and a false positive on image B, both of score 0.5.
  // A before B: TP then FP -> precision [1, 1/2] at recall [1, 1] -> AP 1. B before A: FP then TP ->
  // precision [0, 1/2] at recall [0, 1], monotone [1/2, 1/2] -> AP 1/2. COCOeval takes the images in
  // ascending id, whatever order they came in.
  const at::Tensor g = boxes({{0, 0, 10, 10}}), fp = boxes({{50, 50, 60, 60}}), none = at::zeros({0, 4});
  for (const auto& [id_a, id_b, want] :
       {std::tuple{int64_t(2), int64_t(1), 0.5}, std::tuple{int64_t(1), int64_t(2), 1.0},
        std::tuple{int64_t(-1), int64_t(-1), 1.0}}) {
    MapAccumulator acc, b;
    acc.add_image(g, longs({0}), g, floats({0.5f}), longs({0}), {}, {}, id_a);
    b.add_image(none, longs({}), fp, floats({0.5f}), longs({0}), {}, {}, id_b);
    acc.merge(b.serialize());  // the id travels with the image
    EXPECT_DOUBLE_EQ(acc.compute(1).map50, want) << "ids " << id_a << ", " << id_b;
  }
}

TEST(CocoMap, NoGroundTruthAnywhereGivesMinusOne) {
  MapAccumulator acc;
  acc.add_image(at::zeros({0, 4}), longs({}), boxes({{0, 0, 1, 1}}), floats({0.5f}), longs({0}));
  const MapResult r = acc.compute(1);
  EXPECT_DOUBLE_EQ(r.map50, -1.0);
  EXPECT_DOUBLE_EQ(r.map50_95, -1.0);
}

TEST(CocoMap, InvalidInputsAreRejected) {
  MapAccumulator acc;
  const at::Tensor b = boxes({{0, 0, 1, 1}});
  EXPECT_THROW(acc.add_image(b, longs({0, 1}), b, floats({0.5f}), longs({0})), std::invalid_argument);
  EXPECT_THROW(acc.add_image(b, longs({-1}), b, floats({0.5f}), longs({0})), std::invalid_argument);
  EXPECT_THROW(acc.add_image(b, longs({0}), b, floats({INFINITY}), longs({0})), std::invalid_argument);
  EXPECT_THROW(acc.add_image(b, floats({0.0f}), b, floats({0.5f}), longs({0})), std::invalid_argument);
  EXPECT_EQ(acc.num_images(), 0);
  acc.add_image(b, longs({0}), b, floats({0.5f}), longs({4}));
  EXPECT_THROW(acc.compute(4), std::invalid_argument);
  EXPECT_THROW(acc.compute(0), std::invalid_argument);
  EXPECT_NO_THROW(acc.compute(5));
}

// Deterministic pseudo-random images: ground truths, jittered detections, false positives, misses.
void add_random_images(MapAccumulator& acc, MapAccumulator& all, int first, int count) {
  for (int i = first; i < first + count; ++i) {
    at::manual_seed(1000 + i);
    const int64_t g = 1 + i % 4;
    at::Tensor xy = at::rand({g, 2}) * 80;
    at::Tensor wh = at::rand({g, 2}) * 20 + 5;
    const at::Tensor gt = at::cat({xy, xy + wh}, 1);
    const at::Tensor gc = at::randint(0, 3, {g}, at::kLong);
    const at::Tensor keep = at::rand({g}) > 0.2;
    const int64_t kept = keep.sum().item<int64_t>();
    // Kept ground truths jittered (position and size, never inverted), plus 2 random boxes.
    const at::Tensor jxy = xy.index({keep}) + at::randn({kept, 2}) * 1.5;
    const at::Tensor jwh = wh.index({keep}) * (0.8 + 0.4 * at::rand({kept, 2}));
    const at::Tensor fxy = at::rand({2, 2}) * 60, fwh = at::rand({2, 2}) * 20 + 5;
    const at::Tensor det = at::cat({at::cat({jxy, jxy + jwh}, 1), at::cat({fxy, fxy + fwh}, 1)}, 0);
    const at::Tensor dc = at::cat({gc.index({keep}), at::randint(0, 3, {2}, at::kLong)});
    // Rounded scores so that ties between images occur and the image order matters.
    const at::Tensor ds = at::round(at::rand({det.size(0)}) * 10) / 10;
    acc.add_image(gt, gc, det, ds, dc);
    all.add_image(gt, gc, det, ds, dc);
  }
}

void expect_same(const MapResult& a, const MapResult& b) {
  EXPECT_EQ(a.map50, b.map50);
  EXPECT_EQ(a.map50_95, b.map50_95);
  EXPECT_EQ(a.ap50, b.ap50);
  EXPECT_EQ(a.ap50_95, b.ap50_95);
  EXPECT_EQ(a.num_gt, b.num_gt);
  EXPECT_EQ(a.num_images, b.num_images);
}

TEST(MapAccumulator, SerializeMergeEqualsOneAccumulator) {
  MapAccumulator rank0, rank1, all;
  add_random_images(rank0, all, 0, 7);
  add_random_images(rank1, all, 7, 6);
  const MapResult expected = all.compute(3);
  EXPECT_GT(expected.map50, 0.2);  // a non-trivial case
  EXPECT_LT(expected.map50_95, 1.0);

  MapAccumulator merged = rank0;
  merged.merge(rank1.serialize());
  expect_same(merged.compute(3), expected);

  // Rank 0 gathering every rank's string into a fresh accumulator.
  MapAccumulator gathered;
  for (const std::string& s : {rank0.serialize(), rank1.serialize(), MapAccumulator().serialize()}) gathered.merge(s);
  EXPECT_EQ(gathered.num_images(), 13);
  expect_same(gathered.compute(3), expected);
  EXPECT_EQ(gathered.serialize(), all.serialize());
}

TEST(MapAccumulator, MergeRejectsMalformedStrings) {
  MapAccumulator a, all;
  add_random_images(a, all, 0, 3);
  const std::string s = a.serialize();
  MapAccumulator m;
  EXPECT_THROW(m.merge(""), std::invalid_argument);
  EXPECT_THROW(m.merge("not a serialization at all"), std::invalid_argument);
  EXPECT_THROW(m.merge(s.substr(0, s.size() - 1)), std::invalid_argument);
  EXPECT_THROW(m.merge(s + "x"), std::invalid_argument);
  std::string huge = s;
  huge[8] = '\xff';  // image count far larger than the bytes
  EXPECT_THROW(m.merge(huge), std::invalid_argument);
  EXPECT_EQ(m.num_images(), 0);
  m.merge(s);
  EXPECT_EQ(m.num_images(), 3);
}

}  // namespace
// Adds image `i` of a reference case; counts its crowd regions and its classes with over 100 detections.
void add_case_image(MapAccumulator& acc, const nlohmann::json& image, int& crowds, int& over_max_dets) {
  const auto& gt = image["gt"];
  const auto& dt = image["dt"];
  const int64_t G = int64_t(gt.size()), D = int64_t(dt.size());
  auto gb = at::zeros({G, 4}), db = at::zeros({D, 4}), ds = at::zeros({D}), ga = at::zeros({G});
  auto gc = at::zeros({G}, at::kLong), dc = at::zeros({D}, at::kLong), crowd = at::zeros({G}, at::kByte);
  for (int64_t g = 0; g < G; ++g) {
    const auto& row = gt[size_t(g)];
    for (int k = 0; k < 4; ++k) gb[g][k] = row[size_t(k)].get<double>();
    gc[g] = row[4].get<int64_t>();
    crowd[g] = row[5].get<int>();
    ga[g] = row[6].get<double>();
    crowds += row[5].get<int>();
  }
  std::map<int64_t, int> per_class;
  for (int64_t d = 0; d < D; ++d) {
    const auto& row = dt[size_t(d)];
    for (int k = 0; k < 4; ++k) db[d][k] = row[size_t(k)].get<double>();
    dc[d] = row[4].get<int64_t>();
    ds[d] = row[5].get<double>();
    if (++per_class[row[4].get<int64_t>()] == 101) ++over_max_dets;
  }
  acc.add_image(gb, gc, db, ds, dc, crowd, ga, image["id"].get<int64_t>());
}

// Random cases scored by pycocotools' COCOeval (crowd regions, the three area ranges, an image with
// more than 100 detections of a class, tied scores, duplicate ground truth, a category whose only
// ground truth is a crowd region): summarize()'s AP figures (meridian computes no AR) and every
// class's AP50 and AP50-95 within 0.01 points, the images split in two accumulators merged as the
// distributed evaluation does.
TEST(CocoMap, AgreesWithPycocotools) {
  const auto file =
      std::filesystem::temp_directory_path() /
      ("meridian_cocoeval_" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + ".json");
  const std::string cmd = std::string(MERIDIAN_PYTHON) + " " + std::string(MERIDIAN_SOURCE_DIR) +
                          "/tests/detect/coco_reference.py cases " + file.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  nlohmann::json cases;
  std::ifstream(file) >> cases;
  std::filesystem::remove(file);
  ASSERT_EQ(cases["cases"].size(), 5u);
  constexpr double kTolerance = 1e-4;  // 0.01 points of mAP
  int crowds = 0, over_max_dets = 0, without_ap = 0;
  std::map<std::string, double> max_error;  // per figure, over the cases
  for (const auto& c : cases["cases"]) {
    const auto& images = c["images"];
    MapAccumulator acc, rest;
    for (size_t i = 0; i < images.size(); ++i)
      add_case_image(i < images.size() / 2 ? acc : rest, images[i], crowds, over_max_dets);
    acc.merge(rest.serialize());
    const MapResult r = acc.compute(c["num_classes"].get<int>());
    const auto& want = c["stats"];
    const std::pair<const char*, double> got[] = {{"map50_95", r.map50_95},     {"map50", r.map50},
                                                  {"map75", r.map75},           {"map_small", r.map_small},
                                                  {"map_medium", r.map_medium}, {"map_large", r.map_large}};
    for (const auto& [name, value] : got) {
      const double ref = want[name].get<double>();
      EXPECT_NEAR(value, ref, kTolerance) << name;
      max_error[name] = std::max(max_error[name], std::abs(value - ref));
      std::cout << "[ pycocotools ] " << name << " " << value << " (COCOeval " << ref << ")\n";
    }
    ASSERT_EQ(r.ap50.size(), c["ap50"].size());
    for (size_t k = 0; k < r.ap50.size(); ++k) {
      const double ap50 = c["ap50"][k].get<double>(), ap50_95 = c["ap50_95"][k].get<double>();
      EXPECT_NEAR(r.ap50[k], ap50, kTolerance) << "class " << k;
      EXPECT_NEAR(r.ap50_95[k], ap50_95, kTolerance) << "class " << k;
      max_error["class ap50"] = std::max(max_error["class ap50"], std::abs(r.ap50[k] - ap50));
      max_error["class ap50_95"] = std::max(max_error["class ap50_95"], std::abs(r.ap50_95[k] - ap50_95));
      without_ap += ap50 == -1.0;
    }
  }
  for (const auto& [name, error] : max_error)
    std::cout << "[ pycocotools ] " << name << ": largest |meridian - COCOeval| " << error << " over "
              << cases["cases"].size() << " cases (tolerance " << kTolerance << ")\n";
  EXPECT_GT(crowds, 5);         // the cases do have crowd regions
  EXPECT_EQ(over_max_dets, 5);  // and one image per case past maxDets
  EXPECT_EQ(without_ap, 1);     // and a category COCOeval gives no AP
}

}  // namespace meridian::detect
