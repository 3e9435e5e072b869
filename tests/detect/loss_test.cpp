// Detection loss, assigner and decoding against closed forms and hand-made cases: CIoU by hand in
// double, distance <-> box round trips, DFL as -log p on integer bins, anchors, the task-aligned
// assigner (candidates, top-k, the shared anchor, images without boxes), the loss without boxes
// (pure BCE against zeros), gradients, and a tiny Yolo that overfits two images and is decoded; and
// against the real ultralytics package: its v8DetectionLoss (tests/models/ultralytics_yolo.py loss, one
// Python process) on the same head levels and targets gives meridian's box, cls and dfl terms, total
// and gradient w.r.t. every level, to 1e-4 (relative to the value, or to the largest gradient).
#include "meridian/detect/loss.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>
#include <torch/optim/adamw.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "meridian/detect/boxes.h"
#include "meridian/models/safetensors.h"
#include "meridian/models/yolo.h"

namespace meridian::detect {
namespace {

at::Tensor box_d(double x1, double y1, double x2, double y2) { return at::tensor({x1, y1, x2, y2}, at::kDouble); }

// One 8x8 level of stride 8 (a 64x64 image): anchors at 4, 12, ..., 60.
at::Tensor grid_points() {
  const auto level = at::zeros({1, 1, 8, 8});
  return make_anchors({level}, {8}).points;
}
int64_t anchor_at(double x, double y) { return int64_t((y - 4) / 8) * 8 + int64_t((x - 4) / 8); }

// Every anchor predicts a box of the given size centred on itself.
at::Tensor centred_boxes(const at::Tensor& points, double w, double h) {
  const auto half = at::tensor({float(w / 2), float(h / 2)});
  return at::cat({points - half, points + half}, -1);
}

}  // namespace

TEST(DetectLoss, CiouHandValue) {
  // a = (0,0)-(4,2), b = (1,1)-(5,4): intersection 3 x 1, union 8 + 12 - 3, enclosing box 5 x 4,
  // centres (2,1) and (3,2.5).
  const double iou = 3.0 / 17.0, rho2 = 1.0 + 2.25, c2 = 25.0 + 16.0;
  const double pi = std::acos(-1.0);
  const double v = 4.0 / (pi * pi) * std::pow(std::atan(4.0 / 3.0) - std::atan(4.0 / 2.0), 2);
  const double alpha = v / (v - iou + 1.0);
  const double want = iou - rho2 / c2 - alpha * v;
  EXPECT_NEAR(ciou(box_d(0, 0, 4, 2), box_d(1, 1, 5, 4)).item<double>(), want, 1e-6);
  EXPECT_NEAR(ciou(box_d(1, 1, 5, 4), box_d(0, 0, 4, 2)).item<double>(), want, 1e-6);  // symmetric
  const auto x = at::rand({6, 2}, at::kDouble) * 10;
  const auto boxes = at::cat({x, x + 1 + at::rand({6, 2}, at::kDouble) * 5}, -1);
  EXPECT_TRUE(at::allclose(ciou(boxes, boxes), at::ones({6}, at::kDouble), 0, 1e-6));
  // Disjoint boxes: IoU 0, centre penalty only (same shape, so v = 0): -(10^2) / (12^2 + 2^2).
  EXPECT_NEAR(ciou(box_d(0, 0, 2, 2), box_d(10, 0, 12, 2)).item<double>(), -100.0 / 148.0, 1e-6);
}

TEST(DetectLoss, DistanceBoxRoundTripAndClamp) {
  const auto points = at::rand({20, 2}) * 64;
  const auto dist = at::rand({20, 4}) * 14;
  const auto boxes = dist2bbox(dist, points);
  EXPECT_TRUE(at::allclose(bbox2dist(points, boxes, 15.0), dist, 1e-5, 1e-5));
  EXPECT_TRUE(at::allclose(boxes.narrow(1, 0, 2), points - dist.narrow(1, 0, 2)));
  // Clamped to [0, max - 0.01]: a point outside its box gets 0 on that side.
  const auto d = bbox2dist(at::tensor({10.0f, 10.0f}), at::tensor({12.0f, 0.0f, 40.0f, 12.0f}), 15.0);
  EXPECT_TRUE(at::allclose(d, at::tensor({0.0f, 10.0f, 14.99f, 2.0f})));
}

TEST(DetectLoss, DflIsMinusLogProbabilityOfIntegerBins) {
  const auto logits = at::randn({3, 4, 16});
  const auto logp = at::log_softmax(logits, -1);
  const auto targets =
      at::tensor({0.0f, 3.0f, 7.0f, 14.0f, 1.0f, 1.0f, 9.0f, 2.0f, 5.0f, 6.0f, 11.0f, 0.0f}).view({3, 4});
  const auto loss = dfl_loss(logits, targets);
  ASSERT_EQ(loss.sizes(), (at::IntArrayRef{3}));
  for (int64_t i = 0; i < 3; ++i) {
    double want = 0;
    for (int64_t s = 0; s < 4; ++s) want -= logp[i][s][targets[i][s].item<int64_t>()].item<double>() / 4;
    EXPECT_NEAR(loss[i].item<double>(), want, 1e-5);
  }
  // Between bins: linear interpolation of the two neighbours' cross-entropies.
  const auto frac = dfl_loss(logits.narrow(0, 0, 1), at::full({1, 4}, 2.25f));
  double want = 0;
  for (int64_t s = 0; s < 4; ++s)
    want -= (0.75 * logp[0][s][2].item<double>() + 0.25 * logp[0][s][3].item<double>()) / 4;
  EXPECT_NEAR(frac.item<double>(), want, 1e-5);
  // Decoding a peaked distribution gives its bin.
  auto peaked = at::full({1, 4, 16}, -30.0f);
  for (int64_t s = 0; s < 4; ++s) peaked[0][s][3 * s + 1] = 30.0f;
  EXPECT_TRUE(
      at::allclose(dfl_decode(peaked.view({1, 64}), 16), at::tensor({1.0f, 4.0f, 7.0f, 10.0f}).view({1, 4}), 0, 1e-4));
}

TEST(DetectLoss, AnchorsAreCellCentresLevelByLevel) {
  const auto a = make_anchors({at::zeros({1, 3, 2, 2}), at::zeros({1, 3, 1, 1})}, {8, 16});
  EXPECT_TRUE(
      at::equal(a.points, at::tensor({4.0f, 4.0f, 12.0f, 4.0f, 4.0f, 12.0f, 12.0f, 12.0f, 8.0f, 8.0f}).view({5, 2})));
  EXPECT_TRUE(at::equal(a.strides, at::tensor({8.0f, 8.0f, 8.0f, 8.0f, 16.0f})));
  EXPECT_THROW(make_anchors({at::zeros({1, 3, 2, 2})}, {8, 16}), std::invalid_argument);
}

TEST(DetectAssigner, OneBoxAssignsTopkOfTheAnchorsInsideIt) {
  const auto points = grid_points();  // [64, 2]
  const int64_t nc = 4;
  // gt (10,10)-(42,34): anchor centres inside are x in {12,20,28,36}, y in {12,20,28}: 12 anchors.
  const auto gt = at::tensor({10.0f, 10.0f, 42.0f, 34.0f}).view({1, 4});
  const auto cls = at::tensor({int64_t{3}});
  const auto offsets = at::tensor({int64_t{0}, int64_t{1}});
  const auto scores = at::full({1, 64, nc}, 0.5f);
  const auto pred = centred_boxes(points, 32, 24).unsqueeze(0);  // the gt's size at every anchor
  std::set<int64_t> inside;
  for (double x : {12, 20, 28, 36})
    for (double y : {12, 20, 28}) inside.insert(anchor_at(x, y));

  for (int64_t topk : {10, 3, 20}) {
    AssignerOptions o;
    o.topk = topk;
    const auto a = assign(scores, pred, points, gt, cls, offsets, o);
    const auto fg = a.foreground[0];
    EXPECT_EQ(fg.sum().item<int64_t>(), std::min<int64_t>(topk, 12)) << "topk " << topk;
    for (int64_t i = 0; i < 64; ++i) {
      if (!fg[i].item<bool>()) {
        EXPECT_EQ(a.target_gt[0][i].item<int64_t>(), -1);
        EXPECT_EQ(a.target_scores[0][i].abs().sum().item<float>(), 0.0f);
        continue;
      }
      EXPECT_TRUE(inside.count(i)) << "anchor " << i << " outside the box was assigned";
      EXPECT_EQ(a.target_classes[0][i].item<int64_t>(), 3);
      EXPECT_EQ(a.target_gt[0][i].item<int64_t>(), 0);
      EXPECT_TRUE(at::equal(a.target_boxes[0][i], gt[0]));
      EXPECT_EQ(a.target_scores[0][i].narrow(0, 0, 3).abs().sum().item<float>(), 0.0f);  // other classes 0
    }
    // The anchor nearest the box centre (26, 22) aligns best: its score is the gt's max CIoU.
    const int64_t best = anchor_at(28, 20);
    EXPECT_TRUE(fg[best].item<bool>());
    const double best_iou = ciou(pred[0][best], gt[0]).item<double>();
    EXPECT_NEAR(a.target_scores[0].select(1, 3).max().item<double>(), best_iou, 1e-5);
    EXPECT_NEAR(a.target_scores[0][best][3].item<double>(), best_iou, 1e-5);
    if (topk == 3) EXPECT_FALSE(fg[anchor_at(12, 12)].item<bool>());  // the farthest corner anchor
  }
}

TEST(DetectAssigner, SharedAnchorGoesToTheHigherIouBoxAndEmptyImagesGetNothing) {
  const auto points = grid_points();
  // Image 0 has no boxes; image 1 has A = (0,0)-(24,24) class 0 and B = (8,8)-(40,40) class 1
  // (flat rows 0 and 1). Anchors (12,12) and (20,20) are inside both.
  const auto gt = at::tensor({0.0f, 0.0f, 24.0f, 24.0f, 8.0f, 8.0f, 40.0f, 40.0f}).view({2, 4});
  const auto cls = at::tensor({int64_t{0}, int64_t{1}});
  const auto offsets = at::tensor({int64_t{0}, int64_t{0}, int64_t{2}});
  const auto scores = at::full({2, 64, 2}, 0.5f);
  auto pred = centred_boxes(points, 16, 16).unsqueeze(0).repeat({2, 1, 1});
  const int64_t shared_a = anchor_at(12, 12), shared_b = anchor_at(20, 20);
  pred[1][shared_a].copy_(gt[0]);  // predicts A exactly
  pred[1][shared_b].copy_(gt[1]);  // predicts B exactly
  const auto a = assign(scores, pred, points, gt, cls, offsets);
  EXPECT_EQ(a.foreground[0].sum().item<int64_t>(), 0);
  EXPECT_EQ(a.target_scores[0].abs().sum().item<float>(), 0.0f);
  EXPECT_EQ(a.target_gt[1][shared_a].item<int64_t>(), 0);
  EXPECT_EQ(a.target_classes[1][shared_a].item<int64_t>(), 0);
  EXPECT_EQ(a.target_gt[1][shared_b].item<int64_t>(), 1);
  EXPECT_EQ(a.target_classes[1][shared_b].item<int64_t>(), 1);
  EXPECT_NEAR(a.target_scores[1][shared_b][1].item<double>(), 1.0, 1e-5);  // CIoU 1, the best of B
  // Every positive is inside its own box.
  for (int64_t i = 0; i < 64; ++i) {
    const int64_t g = a.target_gt[1][i].item<int64_t>();
    if (g < 0) continue;
    const double x = points[i][0].item<double>(), y = points[i][1].item<double>();
    EXPECT_TRUE(x > gt[g][0].item<double>() && x < gt[g][2].item<double>() && y > gt[g][1].item<double>() &&
                y < gt[g][3].item<double>());
  }
  EXPECT_THROW(assign(scores, pred, points, gt, cls, at::tensor({int64_t{0}, int64_t{1}, int64_t{1}})),
               std::invalid_argument);  // offsets do not cover M
  EXPECT_THROW(assign(scores, pred, points, gt, at::tensor({int64_t{0}, int64_t{2}}), offsets), std::invalid_argument);
}

// Ultralytics' v8DetectionLoss with its defaults (box 7.5, cls 0.5, dfl 1.5) on random levels of
// batches of 4 (4 classes, 64 px): one image without boxes; small overlapping boxes (its assigner
// widens sides under 16 px when it picks candidates); a large box around smaller ones (an anchor of
// two boxes goes to the one it overlaps best of all it is inside); no box at all. Normalisation:
// Ultralytics returns (box, cls, dfl) * B and the detached items (box, cls, dfl) without B; its
// trainer backpropagates the sum of the first, so meridian's total (= (box + cls + dfl) * B) is that
// sum and meridian's box, cls, dfl are the items.
TEST(DetectLoss, EqualsUltralyticsV8DetectionLoss) {
  namespace fs = std::filesystem;
  const fs::path file = fs::temp_directory_path() / ("meridian_v8loss_" + std::to_string(::getpid()) + ".safetensors");
  const std::string cmd = std::string(MERIDIAN_PYTHON) + " " + MERIDIAN_SOURCE_DIR +
                          "/tests/models/ultralytics_yolo.py loss " + file.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::map<std::string, at::Tensor> ref;
  for (auto& [name, t] : models::load_safetensors(file.string())) ref[name] = t;
  fs::remove(file);
  for (const std::string c : {"boxes", "crowded", "nested", "empty"}) {
    SCOPED_TRACE(c);
    std::vector<at::Tensor> levels;
    for (int l = 0; l < 3; ++l)
      levels.push_back(ref.at(c + ".level." + std::to_string(l)).clone().requires_grad_(true));
    std::vector<int64_t> strides;
    for (int l = 0; l < 3; ++l) strides.push_back(int64_t(ref.at(c + ".strides")[l].item<float>()));
    const auto loss =
        detection_loss(levels, strides, ref.at(c + ".gt_boxes"), ref.at(c + ".gt_classes"), ref.at(c + ".gt_offsets"));
    const auto items = ref.at(c + ".items");
    const double want_total = ref.at(c + ".total").item<double>();
    double worst = 0;
    const auto compare = [&](const char* what, double ours, double theirs) {
      const double rel = std::abs(ours - theirs) / std::max(1.0, std::abs(theirs));
      worst = std::max(worst, rel);
      EXPECT_LE(rel, 1e-4) << what << ": meridian " << ours << ", Ultralytics " << theirs;
    };
    compare("box", loss.box.item<double>(), items[0].item<double>());
    compare("cls", loss.cls.item<double>(), items[1].item<double>());
    compare("dfl", loss.dfl.item<double>(), items[2].item<double>());
    compare("total", loss.total.item<double>(), want_total);
    const auto grads = torch::autograd::grad({loss.total}, levels);
    double grad_worst = 0;
    for (int l = 0; l < 3; ++l) {
      const auto& want = ref.at(c + ".grad." + std::to_string(l));
      const double scale = std::max(1e-12, want.abs().max().item<double>());
      const double diff = (grads[size_t(l)] - want).abs().max().item<double>() / scale;
      grad_worst = std::max(grad_worst, diff);
      EXPECT_LE(diff, 1e-4) << "gradient of level " << l;
    }
    std::cout << "[ v8DetectionLoss " << c << " ] box " << loss.box.item<double>() << " cls " << loss.cls.item<double>()
              << " dfl " << loss.dfl.item<double>() << " total " << loss.total.item<double>()
              << ": max relative |meridian - Ultralytics| " << worst << " (terms, total), " << grad_worst
              << " (gradients, relative to each level's largest)\n";
  }
}

TEST(DetectLoss, WithoutBoxesItIsTheBceOfAllZeroTargets) {
  const std::vector<at::Tensor> levels{at::randn({2, 64 + 3, 4, 4}), at::randn({2, 64 + 3, 2, 2}),
                                       at::randn({2, 64 + 3, 1, 1})};
  const auto empty = at::zeros({0, 4});
  const auto loss = detection_loss(levels, {8, 16, 32}, empty, at::zeros({0}, at::kLong), at::zeros({3}, at::kLong));
  double softplus = 0;  // BCE(x, 0) = log(1 + e^x); target sum 0 -> divided by 1
  for (const auto& l : levels) softplus += at::softplus(l.narrow(1, 64, 3)).sum().item<double>();
  EXPECT_NEAR(loss.total.item<double>(), 0.5 * softplus * 2, 1e-3);
  EXPECT_EQ(loss.box.item<float>(), 0.0f);
  EXPECT_EQ(loss.dfl.item<float>(), 0.0f);
  EXPECT_THROW(
      detection_loss({at::randn({1, 64, 2, 2})}, {8}, empty, at::zeros({0}, at::kLong), at::zeros({2}, at::kLong)),
      std::invalid_argument);  // no class channels
}

namespace {
// Two 64x64 images: bright rectangles (class 0 red, class 1 green) on a dark background.
struct Scene {
  at::Tensor images, boxes, classes, offsets;
};
Scene scene() {
  Scene s;
  s.images = at::full({2, 3, 64, 64}, 0.1f);
  s.boxes = at::tensor({8.0f, 8.0f, 40.0f, 36.0f, 4.0f, 30.0f, 28.0f, 60.0f, 36.0f, 6.0f, 60.0f, 30.0f}).view({3, 4});
  s.classes = at::tensor({int64_t{0}, int64_t{1}, int64_t{0}});
  s.offsets = at::tensor({int64_t{0}, int64_t{1}, int64_t{3}});
  const int64_t image_of[3] = {0, 1, 1};
  for (int64_t i = 0; i < 3; ++i) {
    const auto b = s.boxes[i];
    const int64_t x1 = b[0].item<int64_t>(), y1 = b[1].item<int64_t>(), x2 = b[2].item<int64_t>(),
                  y2 = b[3].item<int64_t>();
    s.images[image_of[i]]
        .select(0, s.classes[i].item<int64_t>())
        .narrow(0, y1, y2 - y1)
        .narrow(1, x1, x2 - x1)
        .fill_(0.9f);
  }
  return s;
}
models::YoloConfig tiny(int64_t classes) {
  auto c = models::YoloConfig::builtin("yolov8", "n", classes);
  c.width = 0.0625;  // 8..64 channels
  c.depth = 0.5;
  return c;
}
}  // namespace

TEST(DetectLoss, FiniteWithGradientForEveryOutput) {
  torch::manual_seed(5);
  models::Yolo model(tiny(2));
  const auto s = scene();
  const auto levels = model->forward(s.images);
  const auto loss = detection_loss(levels, model->strides(), s.boxes, s.classes, s.offsets);
  ASSERT_TRUE(std::isfinite(loss.total.item<double>()));
  EXPECT_GT(loss.box.item<double>(), 0);
  EXPECT_GT(loss.cls.item<double>(), 0);
  EXPECT_GT(loss.dfl.item<double>(), 0);
  EXPECT_NEAR(loss.total.item<double>(), 2 * (loss.box + loss.cls + loss.dfl).item<double>(), 1e-4);
  const auto grads = torch::autograd::grad({loss.total}, levels);
  for (size_t l = 0; l < grads.size(); ++l) {
    ASSERT_TRUE(grads[l].defined()) << "level " << l;
    EXPECT_TRUE(grads[l].isfinite().all().item<bool>());
    EXPECT_GT(grads[l].abs().sum().item<double>(), 0) << "level " << l;
  }
}

// 300 AdamW steps (not ~40: too few for the class-0 box of image 1 to pass 0.25 confidence). The
// loss cannot approach 0: BCE against soft targets (normalised alignment < 1) keeps its entropy.
// Seeds 1..6 ended 4.7x..7.5x below the first step and all decoded every box (about 7 s each here).
TEST(DetectLoss, TinyYoloOverfitsTwoImagesAndDecodesTheBoxes) {
  torch::manual_seed(6);
  models::Yolo model(tiny(2));
  const auto s = scene();
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.0));
  const auto t0 = std::chrono::steady_clock::now();
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    optimizer.zero_grad();
    const auto loss = detection_loss(model->forward(s.images), model->strides(), s.boxes, s.classes, s.offsets);
    loss.total.backward();
    optimizer.step();
    if (step == 0) first = loss.total.item<double>();
    last = loss.total.item<double>();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "[ overfit ] loss " << first << " -> " << last << " in " << seconds << " s\n";
  EXPECT_LT(last, first / 4);
  // Decoded in training mode (BatchNorm on batch statistics: 300 steps at momentum 0.03 leave running stats off).
  at::NoGradGuard no_grad;
  const auto detections = decode(model->forward(s.images), model->strides(), 16, 0.25, 0.7, 100);
  ASSERT_EQ(detections.size(), 2u);
  const int64_t image_of[3] = {0, 1, 1};
  for (int64_t i = 0; i < 3; ++i) {
    const auto& d = detections[size_t(image_of[i])];
    ASSERT_GT(d.boxes.size(0), 0) << "image " << image_of[i];
    const auto iou = box_iou(d.boxes, s.boxes.narrow(0, i, 1)).squeeze(1);
    const auto same_class = d.classes.eq(s.classes[i]);
    const double best = (iou * same_class.to(at::kFloat)).max().item<double>();
    EXPECT_GT(best, 0.5) << "gt " << i;
  }
}

// decode(multi_label): an anchor with two classes above conf gives two detections (same box, each
// class's score), the best-class decode one; the NMS is per class, so neither suppresses the other.
TEST(DetectLoss, MultiLabelDecodeKeepsEveryClassAboveConf) {
  const int64_t reg_max = 16, nc = 3;
  auto level = at::full({1, 4 * reg_max + nc, 1, 1}, -20.0f);  // one anchor of stride 32; all classes low
  level.narrow(1, 0, 4 * reg_max).zero_();                     // DFL: uniform bins, 7.5 strides to each side
  level[0][4 * reg_max + 0][0][0] = 2.0f;                      // class 0: 0.881
  level[0][4 * reg_max + 2][0][0] = -1.0f;                     // class 2: 0.269
  const auto one = decode({level}, {32}, reg_max, 0.25, 0.7, 300);
  ASSERT_EQ(one[0].scores.size(0), 1);
  EXPECT_EQ(one[0].classes[0].item<int64_t>(), 0);
  const auto both = decode({level}, {32}, reg_max, 0.25, 0.7, 300, /*multi_label=*/true);
  ASSERT_EQ(both[0].scores.size(0), 2);
  EXPECT_EQ(both[0].classes[0].item<int64_t>(), 0);
  EXPECT_EQ(both[0].classes[1].item<int64_t>(), 2);
  EXPECT_NEAR(both[0].scores[1].item<double>(), 1 / (1 + std::exp(1.0)), 1e-6);
  EXPECT_TRUE(both[0].boxes[0].equal(both[0].boxes[1]));
  const auto capped = decode({level}, {32}, reg_max, 0.25, 0.7, 300, /*multi_label=*/true, /*max_nms=*/1);
  ASSERT_EQ(capped[0].scores.size(0), 1);  // the highest score only
  EXPECT_EQ(capped[0].classes[0].item<int64_t>(), 0);
}

}  // namespace meridian::detect
