// Each task's own config keys fill its settings struct (one binding table per struct declares and
// reads them): every key set to a value that is not its default arrives in its field; an empty
// config gives the documented defaults; the schema declares the same defaults with_defaults writes.
#include <gtest/gtest.h>

#include "meridian/core/config.h"
#include "meridian/core/error.h"
#include "meridian/tasks/detect_task.h"
#include "meridian/tasks/lm_task.h"
#include "meridian/tasks/registry.h"
#include "meridian/tasks/siglip_task.h"

namespace meridian::tasks {
namespace {

Config parse(const std::string& yaml) { return Config::parse(yaml, "test.yaml"); }

TEST(TaskSettings, DetectKeysArriveInTheirFields) {
  const auto s = DetectSettings::from_config(parse(R"(
train: {batch: 4}
data: {image_size: 320, augment: false, workers: 2, mosaic: 0.3, flip: 0.1, scale: 0.2, translate: 0.05,
       degrees: 5, hsv_h: 0.01, hsv_s: 0.5, hsv_v: 0.3, close_mosaic: 3}
task: {box: 5, cls: 1, dfl: 2, conf: 0.01, iou: 0.6, max_det: 100, class_names: [car, boat]}
)"));
  EXPECT_EQ(s.batch, 4);
  EXPECT_EQ(s.eval.image_size, 320);
  EXPECT_FALSE(s.augment.enabled);
  EXPECT_EQ(s.workers, 2);
  EXPECT_DOUBLE_EQ(s.augment.mosaic_prob, 0.3);
  EXPECT_DOUBLE_EQ(s.augment.flip_prob, 0.1);
  EXPECT_DOUBLE_EQ(s.augment.scale, 0.2);
  EXPECT_DOUBLE_EQ(s.augment.translate, 0.05);
  EXPECT_DOUBLE_EQ(s.augment.degrees, 5);
  EXPECT_DOUBLE_EQ(s.augment.hsv_h, 0.01);
  EXPECT_DOUBLE_EQ(s.augment.hsv_s, 0.5);
  EXPECT_DOUBLE_EQ(s.augment.hsv_v, 0.3);
  EXPECT_EQ(s.close_mosaic, 3);
  EXPECT_DOUBLE_EQ(s.loss.box, 5);
  EXPECT_DOUBLE_EQ(s.loss.cls, 1);
  EXPECT_DOUBLE_EQ(s.loss.dfl, 2);
  EXPECT_DOUBLE_EQ(s.eval.conf, 0.01);
  EXPECT_DOUBLE_EQ(s.eval.iou, 0.6);
  EXPECT_EQ(s.eval.max_det, 100);
  EXPECT_EQ(s.class_names, (std::vector<std::string>{"car", "boat"}));

  // Unset: Ultralytics' defaults, augmentation on.
  const auto d = DetectSettings::from_config(parse("task: {name: detect}"));
  EXPECT_EQ(d.batch, 16);
  EXPECT_TRUE(d.augment.enabled);
  EXPECT_DOUBLE_EQ(d.augment.mosaic_prob, 1.0);
  EXPECT_EQ(d.close_mosaic, 10);
  EXPECT_DOUBLE_EQ(d.loss.box, 7.5);
  EXPECT_DOUBLE_EQ(d.eval.iou, 0.7);
  EXPECT_TRUE(d.class_names.empty());

  try {
    DetectSettings::from_config(parse("data: {image_size: 100}"));
    FAIL() << "a size that is not a multiple of 32 was taken";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.field(), "data.image_size");
  }
}

TEST(TaskSettings, LmKeysArriveInTheirFields) {
  const auto s =
      LmSettings::from_config(parse("train: {batch: 3}\ndata: {seq_len: 96, mode: pad}\ntask: {init: w.safetensors}"));
  EXPECT_EQ(s.batch, 3);
  EXPECT_EQ(s.seq_len, 96);
  EXPECT_EQ(s.mode, data::TextLoaderOptions::Pad);
  EXPECT_EQ(s.init, "w.safetensors");
  const auto d = LmSettings::from_config(parse("task: {name: lm}"));
  EXPECT_EQ(d.batch, 8);
  EXPECT_EQ(d.seq_len, 0);  // model.max_seq_len
  EXPECT_EQ(d.mode, data::TextLoaderOptions::Pack);
  EXPECT_EQ(d.init, "");
}

TEST(TaskSettings, SiglipKeysArriveInTheirFields) {
  const auto s = SiglipSettings::from_config(parse(R"(
train: {batch: 5}
task: {loss: softmax, prompts: ["a {} seen from above"], init: hf/siglip}
data: {augment: true, workers: 3}
)"));
  EXPECT_EQ(s.batch, 5);
  EXPECT_TRUE(s.softmax);
  EXPECT_EQ(s.prompts, (std::vector<std::string>{"a {} seen from above"}));
  EXPECT_EQ(s.init, "hf/siglip");
  EXPECT_TRUE(s.augment);
  EXPECT_EQ(s.workers, 3);
  const auto d = SiglipSettings::from_config(parse("task: {name: siglip}"));
  EXPECT_EQ(d.batch, 32);
  EXPECT_FALSE(d.softmax);
  EXPECT_EQ(d.prompts, default_prompts());
  EXPECT_FALSE(d.augment);
}

TEST(TaskSettings, TheSchemaDeclaresTheStructsDefaults) {
  // with_defaults writes what each schema declares; reading that back gives a default struct.
  const auto detect = DetectSettings::from_config(with_defaults(parse("task: {name: detect}")));
  EXPECT_EQ(detect.batch, DetectSettings{}.batch);
  EXPECT_DOUBLE_EQ(detect.augment.hsv_s, DetectSettings{}.augment.hsv_s);
  EXPECT_TRUE(detect.augment.enabled);
  const auto lm = with_defaults(parse("task: {name: lm}"));
  EXPECT_EQ(lm.text("data.mode"), "pack");
  EXPECT_FALSE(lm.has("data.seq_len"));  // no fixed default: model.max_seq_len
  const auto siglip = with_defaults(parse("task: {name: siglip}"));
  EXPECT_EQ(siglip.text("task.loss"), "sigmoid");
  EXPECT_EQ(DataSettings::from_config(siglip).eval, "");
  EXPECT_EQ(DataSettings::from_config(parse("data: {train: a.h5, eval: b.h5}")).eval, "b.h5");
}

}  // namespace
// optim.name auto, worked by hand from Ultralytics' BaseTrainer.build_optimizer and default.yaml.
TEST(TaskSettings, UltralyticsAutoOptimizer) {
  // COCO at 8 ranks x 16 for 100 epochs: B 128, ceil(118287 / 128) = 925 iterations per epoch x 100
  // = 92,500 > 10,000: SGD lr 0.01 momentum 0.9, weight decay 5e-4 x 128 / 64, warmup 3 x 925.
  Config coco = parse("task: {name: detect}\nmodel: {yaml: yolo11n.yaml, num_classes: 80}\ntrain: {epochs: 100}\n");
  const std::string line = ultralytics_auto(coco, 118287, 8);
  EXPECT_NE(line.find("sgd (92500 iterations"), std::string::npos) << line;
  EXPECT_EQ(coco.get<std::string>("optim.name"), "sgd");
  EXPECT_DOUBLE_EQ(coco.get<double>("optim.lr"), 0.01);
  EXPECT_DOUBLE_EQ(coco.get<double>("optim.momentum"), 0.9);
  EXPECT_DOUBLE_EQ(coco.get<double>("optim.warmup_bias_lr"), 0.1);
  EXPECT_DOUBLE_EQ(coco.get<double>("optim.weight_decay"), 0.001);
  EXPECT_EQ(coco.get<int64_t>("optim.warmup"), 2775);
  EXPECT_EQ(coco.get<std::string>("optim.schedule"), "linear");
  EXPECT_DOUBLE_EQ(coco.get<double>("optim.min_lr"), 1e-4);
  EXPECT_DOUBLE_EQ(coco.get<double>("train.ema"), 0.9999);
  // A small set on 2 ranks x 16, 500 steps: B 32, accumulated 2 to 64 images a step, 250 epochs of
  // 128 images = 2 iterations each, 500 in all: AdamW at round(0.01 / 84, 6) = 0.000119; weight decay
  // 5e-4 x 32 x 2 / 64; the warmup's floor of 100 steps. A key the config gives stays.
  Config small = parse(
      "task: {name: detect}\nmodel: {yaml: yolo11n.yaml, num_classes: 80}\ntrain: {steps: 500}\n"
      "optim: {name: auto, clip: 3}\n");
  ultralytics_auto(small, 128, 2);
  EXPECT_EQ(small.get<std::string>("optim.name"), "adamw");
  EXPECT_EQ(small.get<int64_t>("train.accumulate"), 2);  // up to 64 images per step
  EXPECT_EQ(coco.get<int64_t>("train.accumulate"), 1);
  EXPECT_DOUBLE_EQ(small.get<double>("optim.lr"), 0.000119);
  EXPECT_DOUBLE_EQ(small.get<double>("optim.weight_decay"), 5e-4);
  EXPECT_EQ(small.get<int64_t>("optim.warmup"), 100);
  EXPECT_DOUBLE_EQ(small.get<double>("optim.clip"), 3);
  EXPECT_FALSE(small.has("optim.momentum"));
  // auto is the detect task's.
  Config lm = parse("task: {name: lm}\noptim: {name: auto}\n");
  try {
    describe_data(lm, "", 1);
    FAIL() << "optim.name auto was taken for task lm";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.field(), "optim.name");
  }
}

}  // namespace meridian::tasks
