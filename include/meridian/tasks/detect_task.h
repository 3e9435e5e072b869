// YOLO-style object detection as a train::Task: models::Yolo on a `detection` dataset
// (data::DetectionLoader: mosaic / affine / HSV / flip augmentation), the task-aligned loss of
// detect/loss.h, and COCO-style mAP on an evaluation set (detect/coco_map.h) computed distributed.
//
// Config (besides `model:`, models::YoloConfig; model.num_classes defaults to the dataset's):
//   train.batch         images per rank per micro-step (16)
//   data.image_size     training / evaluation size S (multiple of 32; default: the stored size)
//   data.augment        true (default) | false: everything below off
//   data.mosaic         probability of a 4-image mosaic (1.0); data.close_mosaic: the last this many
//                       epochs (of train.steps) train without mosaic (10; 0: never closed)
//   data.scale, data.translate, data.degrees, data.flip, data.hsv_h, data.hsv_s, data.hsv_v
//                       data::DetectionAugment's values (0.5, 0.1, 0, 0.5, 0.015, 0.7, 0.4)
//   data.eval           a detection dataset for Task::evaluate (none: no evaluation)
//   task.box, task.cls, task.dfl   loss weights (7.5, 0.5, 1.5)
//   task.conf, task.iou, task.max_det   evaluation decode: confidence threshold (0.001), NMS IoU
//                       (0.7), detections per image (300)
//   model.sync_bn       BatchNorm statistics over all ranks (parallel::SyncBatchNorm2d on its own communicator)
//   task.class_names    written by tasks::describe_data from the training set (predict labels)
//   task.init           an Ultralytics detection state_dict as .safetensors (--init): models::load_ultralytics_weights
// The loss is Ultralytics': detect::detection_loss's total (the per-image loss x this rank's batch,
// its loss.sum() * batch_size) x the ranks x train.accumulate (its loss *= world_size, and its
// micro-batches summed, not averaged), so the gradient, optim.clip and SGD's lr act as there.
#pragma once

#include <memory>
#include <opencv2/core.hpp>
#include <string>
#include <vector>

#include "meridian/core/config_schema.h"
#include "meridian/data/box_augment.h"
#include "meridian/detect/coco_map.h"
#include "meridian/detect/loss.h"
#include "meridian/models/yolo.h"
#include "meridian/tasks/checkpoint_eval.h"
#include "meridian/tasks/model_source.h"
#include "meridian/tasks/predict.h"
#include "meridian/train/settings.h"
#include "meridian/train/task.h"

namespace meridian::comm {
class Runtime;
}

namespace meridian::ckpt {
class Reader;
}

namespace meridian::tasks {

struct DetectEvalOptions {
  int64_t image_size = 0;  // 0: the stored size
  double conf = 0.001, iou = 0.7;
  int64_t max_det = 300;
  int64_t batch = 16;     // images per forward
  std::string save_json;  // task.save_json: COCO results JSON of every detection (rank 0 writes it)
  static DetectEvalOptions from_config(const Config& config);  // DetectSettings::from_config(config).eval
};

// The detect task's own keys (train.batch, data: and task: keys above), each bound once to a field:
// `declare` puts them in a schema, `from_config` fills the struct (unset keys: these defaults).
// Not collective; ConfigError for a data.image_size that is not a multiple of 32.
struct DetectSettings {
  int64_t batch = 16;
  int64_t workers = 0;             // data.workers; 0: data::loader_workers' default
  int64_t close_mosaic = 10;       // epochs
  data::DetectionAugment augment;  // data.augment (on by default) and its gains
  detect::DetectionLossOptions loss;
  DetectEvalOptions eval;                // data.image_size, task.conf, task.iou, task.max_det
  std::vector<std::string> class_names;  // task.class_names (written from the training set)
  std::string init;                      // task.init: an Ultralytics state_dict (.safetensors)
  DetectSettings() { augment.enabled = true; }
  static void declare(ConfigSchema& schema);
  static DetectSettings from_config(const Config& config);
};

struct DetectEval {
  detect::MapResult map;
  std::vector<std::string> class_names;
  int64_t images = 0, boxes = 0, detections = 0;
  train::Metrics metrics() const;  // map50, map50_95 (in %), images, detections (after NMS, all ranks)
  std::string per_class() const;   // one line per class: name, boxes, AP50, AP50-95
};

// Collective over the runtime's ranks (one allgather of the serialised predictions): every rank
// predicts on its contiguous share of `path`'s images (model in eval mode, restored after), then
// every rank scores all of them (the same result everywhere, no broadcast) with pycocotools'
// semantics (detect/coco_map.h) in the pixels of the original images: the letterbox of prep undone
// for the boxes and the ground truth (files without /image_sizes: the stored images). With
// options.save_json, rank 0 also writes every detection as COCO results JSON ([{"image_id",
// "category_id", "bbox": [x, y, w, h] (3 decimals), "score" (5 decimals)}]; image_id: COCO's id
// (prep --coco), else the file name's stem as a number when it is one, else the stem; category_id:
// COCO's category id, else the class index), which pycocotools scores against the original
// annotations. DataError for a file that is not a detection dataset or whose classes exceed the model's.
DetectEval evaluate_detection(const comm::Runtime& runtime, models::Yolo& model, const std::string& path,
                              const DetectEvalOptions& options);

// Images [B, S, S, 3] or [B, 3, S, S] uint8 -> float [B, 3, S, S] in [0, 1] on `device`.
at::Tensor detection_input(const at::Tensor& images, const c10::Device& device);

// A detection in the pixels of the original image (clipped to it).
struct ImageDetection {
  int64_t cls = 0;
  double score = 0, x1 = 0, y1 = 0, x2 = 0, y2 = 0;
};

// Not collective; `model` in eval mode on `device`. Detects objects in one RGB image of any size:
// letterboxed to options.image_size (data::letterbox, as prep writes detection datasets; a positive
// multiple of 32), decoded with options.conf / iou / max_det, boxes mapped back to the image.
std::vector<ImageDetection> detect_image(models::Yolo& model, const cv::Mat& rgb, const DetectEvalOptions& options,
                                         const c10::Device& device);

// Not collective: Ultralytics' optimizer=auto and the training defaults around it (its
// ultralytics/cfg/default.yaml and BaseTrainer), written into `config` on the keys it leaves unset,
// for a run of train.epochs (else train.steps) over `images` training images on `world_size` ranks
// with B = train.batch x ranks images per iteration, N = model.num_classes:
//   optim.name      sgd when ceil(images / max(B, 64)) x epochs > 10,000 iterations, else adamw
//   optim.lr        sgd 0.01; adamw round(0.002 x 5 / (4 + N), 6)     optim.momentum 0.9 (sgd)
//   train.accumulate    max(round(64 / B), 1) (Ultralytics accumulates up to its nominal 64 images)
//   optim.weight_decay  5e-4 x B x train.accumulate / 64
//   optim.warmup    max(3 epochs, 100) steps; optim.warmup_momentum 0.8, optim.warmup_bias_lr 0.1 (sgd)
//   optim.schedule  linear; optim.min_lr = optim.lr x 0.01 (lrf)    optim.clip 10
//   train.ema 0.9999, train.ema_tau 2000
// optim.name is always set (auto is replaced); the other keys only when the config does not give
// them. Returns one line saying what it chose and why.
std::string ultralytics_auto(Config& config, int64_t images, int world_size);

// Not collective: the detect task's TaskSpec::resolve: records what a checkpoint must know about the
// training data to be used without it (task.class_names for predict's labels, model.num_classes,
// data.image_size; model.yaml_text for a model YAML of the user's own), unless the config already
// says, and with `auto_optimizer` (optim.name auto, its default when unset) decides it by ultralytics_auto.
std::string resolve_detect(Config& config, const std::string& train_data, int world_size, bool auto_optimizer);

// Not collective: the Yolo of `model` (a detect checkpoint, or Ultralytics weights with the model YAML
// of its config) on `device`. UserError when published weights' class head is for another class count.
models::Yolo detect_model(const ModelSource& model, c10::Device device);

// Not collective: TaskSpec::published_file_config of the detect task. Sets model.yaml, unless given,
// to the YAML beside `weights` (<stem>.yaml, else the only .yaml in its folder: what meridian export
// writes) and task.class_names to that YAML's `names` when it has them. UserError when no YAML is
// given or beside the weights.
std::string detect_file_config(Config& config, const std::string& weights);

// Collective (a barrier, sums): `meridian predict` with a detect model (TaskSpec::predict): every
// rank takes every size-th image of options.images' sorted list (or the one image file) and writes
// <out>/<name>.jpg with the boxes drawn and <out>/labels/<name>.txt (YOLO format: class cx cy w h
// confidence, normalised to the image). UserError for a bad size, no images, or two images that
// would write the same output (naming both); an unreadable image is logged, skipped and counted.
PredictSummary predict_detect(const comm::Runtime& runtime, const ModelSource& model, const PredictOptions& options);

class DetectTask : public train::Task {
 public:
  // Collective: opens the data (every rank the same file), builds the model on the runtime's device.
  DetectTask(const comm::Runtime& runtime, const Config& config, const train::TrainerSettings& trainer,
             const std::string& train_data, train::DataPosition start = {});
  // Declares this task's keys: its model:, task: and data: keys and train.batch (tasks::config_schema).
  static void declare(ConfigSchema& schema);
  // Collective: TaskSpec::evaluate of this task (COCO mAP of `model`: a checkpoint or Ultralytics weights).
  static CheckpointEval evaluate(const comm::Runtime& runtime, const ModelSource& model, const std::string& data_path);
  ~DetectTask() override;

  std::string name() const override { return "detect"; }
  std::shared_ptr<torch::nn::Module> model() override;
  int64_t batch_size() const override;
  double flops_per_sample() const override;  // models::YoloConfig::flops at the training size
  void next_batch() override;
  at::Tensor batch_rows() const override;
  void set_shares(const std::vector<int64_t>& shares) override;
  at::Tensor forward() override;           // the per-image detection loss of this rank's batch
  train::Metrics evaluate() override;      // map50, map50_95 on data.eval
  train::Metrics step_metrics() override;  // box, cls, dfl parts of the last loss; boxes in the batch
  train::DataPosition data_position() const override;
  int64_t batches_per_epoch() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace meridian::tasks
