// The detect task: its settings (DetectSettings' keys) and the train::Task that trains a Yolo on
// DetectionLoader batches with the detection loss at Ultralytics' scale.
#include <spdlog/spdlog.h>
#include <torch/nn/functional.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "meridian/comm/communicator.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/config_binding.h"
#include "meridian/core/error.h"
#include "meridian/data/detection_loader.h"
#include "meridian/data/format.h"
#include "meridian/data/loader.h"
#include "meridian/detect/loss.h"
#include "meridian/nn/autocast.h"
#include "meridian/tasks/detect_task.h"
#include "meridian/train/batch_copier.h"
#include "meridian/train/settings.h"

namespace meridian::tasks {

namespace {
const ConfigBinding<DetectSettings>& detect_bindings() {
  using S = DetectSettings;
  static const auto table = [] {
    ConfigBinding<S> b;
    const auto augment = [](auto member) {
      return [member](S & s) -> auto& { return s.augment.*member; };
    };
    const auto loss = [](auto member) {
      return [member](S & s) -> auto& { return s.loss.*member; };
    };
    const auto eval = [](auto member) {
      return [member](S & s) -> auto& { return s.eval.*member; };
    };
    using A = data::DetectionAugment;
    b.integer("train.batch", &S::batch, "images per rank per micro-step").at_least(1);
    b.integer("data.image_size", eval(&DetectEvalOptions::image_size),
              "training and evaluation image side, a multiple of 32; 0: the dataset's")
        .at_least(0);
    b.boolean("data.augment", augment(&A::enabled),
              "YOLO augmentation (mosaic, affine, HSV, flip) of the training images");
    b.integer("data.workers", &S::workers,
              "threads per rank that decode the images of a JPEG dataset; 0: 1 on a CPU rank, 4 on a GPU rank")
        .at_least(0)
        .at_most(256);
    b.number("data.mosaic", augment(&A::mosaic_prob), "probability of a 4-image mosaic").at_least(0).at_most(1);
    b.number("data.flip", augment(&A::flip_prob), "probability of a horizontal flip").at_least(0).at_most(1);
    b.number("data.scale", augment(&A::scale), "scale drawn in [1 - scale, 1 + scale]").at_least(0).at_most(0.95);
    b.number("data.translate", augment(&A::translate), "translation drawn in +-translate x the image size")
        .at_least(0)
        .at_most(1);
    b.number("data.degrees", augment(&A::degrees), "rotation drawn in +-degrees").at_least(0).at_most(180);
    b.number("data.hsv_h", augment(&A::hsv_h), "hue gain").at_least(0).at_most(1);
    b.number("data.hsv_s", augment(&A::hsv_s), "saturation gain").at_least(0).at_most(1);
    b.number("data.hsv_v", augment(&A::hsv_v), "value gain").at_least(0).at_most(1);
    b.integer("data.close_mosaic", &S::close_mosaic, "the last epochs of the run without mosaic; 0: none").at_least(0);
    using L = detect::DetectionLossOptions;
    b.number("task.box", loss(&L::box), "weight of the CIoU box loss").at_least(0);
    b.number("task.cls", loss(&L::cls), "weight of the classification loss").at_least(0);
    b.number("task.dfl", loss(&L::dfl), "weight of the distribution focal loss").at_least(0);
    b.number("task.conf", eval(&DetectEvalOptions::conf),
             "evaluation: minimum confidence of a detection; every class of a box above it is a detection of its own "
             "(Ultralytics' validator's multi-label NMS; `predict` keeps each box's best class)")
        .at_least(0)
        .below(1);
    b.number("task.iou", eval(&DetectEvalOptions::iou), "evaluation: NMS IoU threshold").above(0).at_most(1);
    b.integer("task.max_det", eval(&DetectEvalOptions::max_det), "evaluation: detections kept per image").at_least(1);
    b.strings("task.class_names", &S::class_names, "class names, for predict's labels").defaults_to("the dataset's");
    b.string("task.save_json", eval(&DetectEvalOptions::save_json),
             "evaluation: also write the detections as COCO results JSON to this file (eval --save-json); '': no");
    b.string("task.init", &S::init,
             "weights to start from: an Ultralytics detection state_dict as one .safetensors file (docs/running.md "
             "converts a .pt); '': random");
    return b;
  }();
  return table;
}
}  // namespace

void DetectSettings::declare(ConfigSchema& schema) { detect_bindings().declare(schema); }

DetectSettings DetectSettings::from_config(const Config& c) {
  const DetectSettings s = detect_bindings().read(c);
  if (s.eval.image_size < 0 || s.eval.image_size % 32 != 0)
    throw ConfigError(c.origin(), "data.image_size", "must be a multiple of 32 (0: the stored size)");
  return s;
}

DetectEvalOptions DetectEvalOptions::from_config(const Config& c) { return DetectSettings::from_config(c).eval; }

struct DetectTask::Impl {
  const comm::Runtime& rt;
  models::YoloConfig mc;
  DetectSettings settings;
  std::string train_data, eval_data;
  int64_t image_size = 0;
  std::unique_ptr<data::DetectionLoader> loader;
  std::unique_ptr<comm::Communicator> loss_comm;  // the loss's global normaliser (detection_loss)
  std::unique_ptr<comm::Communicator> bn_comm;    // model.sync_bn: SyncBatchNorm's own (outlives the model)
  models::Yolo model{nullptr};
  at::Tensor images, boxes, classes, offsets;  // the current batch (images on the device)
  train::BatchCopier copier;                   // host batches to the device (GPU: pinned, on a side stream)
  train::DataPosition position;
  at::Tensor rows;        // the last batch's dataset rows (host)
  at::Tensor last_parts;  // box, cls and dfl of the last loss, on the device: read when logged
  int64_t last_boxes = 0;
  double loss_scale = 1;  // ranks x train.accumulate: Ultralytics' loss *= world_size and its summed accumulation

  Impl(const comm::Runtime& runtime, const Config& c, const train::TrainerSettings& trainer,
       const std::string& train_data, train::DataPosition start)
      : rt(runtime),
        settings(DetectSettings::from_config(c)),
        train_data(train_data),
        eval_data(DataSettings::from_config(c).eval),
        copier(runtime.device()),
        position(start) {
    const std::string& file = c.origin();
    if (train_data.empty()) throw ConfigError(file, "data.train", "missing: give --data or data.train");
    const data::DatasetInfo info = data::validate_dataset(train_data);
    if (info.kind != "detection")
      throw DataError(train_data, "kind", "the detect task needs a detection dataset (got " + info.kind + ")");
    mc = models::YoloConfig::from_config(c);
    const int64_t data_classes = int64_t(info.class_names.size());
    if (!c.has("model.num_classes"))
      mc.num_classes = std::max<int64_t>(1, data_classes);
    else if (mc.num_classes < data_classes)
      throw ConfigError(
          file, "model.num_classes",
          std::to_string(mc.num_classes) + " is fewer than the dataset's " + std::to_string(data_classes) + " classes");
    settings.loss.reg_max = mc.reg_max;
    image_size = settings.eval.image_size > 0 ? settings.eval.image_size : info.height;
    if (rt.rank() == 0) {  // where the config and the dataset disagree, say what the run does
      if (image_size != info.height)
        spdlog::warn(
            "data.image_size {} differs from the dataset's {} px images ({}): they are letterboxed to {} px on load "
            "(data.image_size: 0 trains at the stored size)",
            image_size, info.height, train_data, image_size);
      if (mc.num_classes > data_classes && c.has("model.num_classes"))
        spdlog::warn("model.num_classes {} is above the dataset's {} classes ({}): classes {}..{} have no examples",
                     mc.num_classes, data_classes, train_data, data_classes, mc.num_classes - 1);
    }

    loss_scale = double(rt.size()) * double(trainer.accumulate);
    loss_comm = comm::make_communicator(rt, comm::default_backend(rt));
    data::DetectionLoaderOptions lo;
    lo.path = train_data;
    lo.pinned = rt.device().is_cuda();
    lo.batch_size = settings.batch;
    lo.seed = uint64_t(trainer.seed);
    lo.workers = data::loader_workers(settings.workers, rt.device().is_cuda());
    lo.image_size = int(image_size == info.height ? 0 : image_size);
    lo.epoch = start.epoch;
    lo.position = start.position;
    lo.augment = settings.augment;
    // close_mosaic: the last epochs of the run, train.epochs or counted from train.steps and the global batch.
    const int64_t close = settings.close_mosaic;
    const int64_t global = settings.batch * trainer.accumulate * rt.size();
    const int64_t steps_per_epoch = std::max<int64_t>(1, info.count / std::max<int64_t>(1, global));
    const int64_t epochs = trainer.epochs > 0 ? int64_t(std::ceil(trainer.epochs))
                                              : (trainer.steps + steps_per_epoch - 1) / steps_per_epoch;
    lo.close_mosaic_epoch = close > 0 ? std::max<int64_t>(0, epochs - close) : -1;
    loader = std::make_unique<data::DetectionLoader>(rt, lo);

    if (mc.sync_bn) bn_comm = comm::make_communicator(rt, comm::default_backend(rt));
    model = models::Yolo(mc, bn_comm.get());
    const int64_t stride = model->max_stride();
    if (image_size % stride != 0)
      throw ConfigError(c.source("data.image_size"), "data.image_size",
                        std::to_string(image_size) + " is not a multiple of the model's largest stride " +
                            std::to_string(stride) + " (" + mc.spec.source + ")");
    if (!settings.init.empty() && start.epoch == 0 && start.position == 0) {  // a resume takes the checkpoint's
      const auto kept = models::load_ultralytics_weights(*model, settings.init);
      if (rt.rank() == 0 && !kept.empty())
        spdlog::warn(
            "task.init {}: its class head is for other classes than this model's {}: {} tensors of it start "
            "from initialisation ({} ...)",
            settings.init, mc.num_classes, kept.size(), kept.front());
      else if (rt.rank() == 0)
        spdlog::info("task.init: weights from {}", settings.init);
    }
    model->to(rt.device());
    if (rt.rank() == 0)
      spdlog::info(
          "detect: {} classes, {} px, {} training images ({} epochs of {} steps{}), {:.2f} GFLOP per image forward",
          mc.num_classes, image_size, info.count, epochs, steps_per_epoch,
          lo.close_mosaic_epoch >= 0 && lo.augment.enabled
              ? ", mosaic off from epoch " + std::to_string(lo.close_mosaic_epoch)
              : "",
          model->flops(image_size) / 1e9);
  }
};

void DetectTask::declare(ConfigSchema& schema) {
  models::YoloConfig::declare(schema);
  DetectSettings::declare(schema);
}

DetectTask::DetectTask(const comm::Runtime& rt, const Config& config, const train::TrainerSettings& trainer,
                       const std::string& train_data, train::DataPosition start)
    : impl_(std::make_unique<Impl>(rt, config, trainer, train_data, start)) {}
DetectTask::~DetectTask() = default;

std::shared_ptr<torch::nn::Module> DetectTask::model() { return impl_->model.ptr(); }
int64_t DetectTask::batch_size() const { return impl_->settings.batch; }
double DetectTask::flops_per_sample() const { return impl_->model->flops(impl_->image_size); }
train::DataPosition DetectTask::data_position() const { return impl_->position; }
int64_t DetectTask::batches_per_epoch() const { return impl_->loader->sampler().steps_per_epoch(); }

void DetectTask::set_shares(const std::vector<int64_t>& shares) {
  auto& m = *impl_;
  m.loader->set_shares(shares, m.position.epoch, m.position.position);
}

at::Tensor DetectTask::batch_rows() const { return impl_->rows; }

void DetectTask::next_batch() {
  auto& m = *impl_;
  const data::DetectionBatch b = m.loader->next();
  m.position = {b.epoch, b.next_position};
  m.rows = b.rows;
  const auto device = m.rt.device();
  // The class range checked here, on the host batch: the assigner checks only host tensors (on a GPU
  // its check would be a wait for the device).
  const int64_t nc = m.mc.num_classes;
  if (b.classes.numel() > 0 && (b.classes.min().item<int64_t>() < 0 || b.classes.max().item<int64_t>() >= nc))
    throw DataError(m.train_data, "dataset 'classes'",
                    "a box's class is outside [0, model.num_classes = " + std::to_string(nc) + ")");
  const auto on_device = m.copier.to_device({b.images, b.boxes, b.classes});
  m.images = detection_input(on_device[0], device);
  m.boxes = on_device[1];
  m.classes = on_device[2];
  m.offsets = b.box_offsets;  // read on the host by the assigner
}

at::Tensor DetectTask::forward() {
  auto& m = *impl_;
  auto levels = m.model->forward(m.images);
  for (auto& l : levels) l = l.to(at::kFloat);  // the loss in float32 under bf16 autocast
  const nn::AutocastScope float32(m.images.device().type(), false);
  const auto loss = detect::detection_loss(levels, m.model->strides(), m.boxes, m.classes, m.offsets, m.settings.loss,
                                           m.loss_comm.get());
  m.last_parts = at::stack({loss.box, loss.cls, loss.dfl});  // read when logged (step_metrics)
  m.last_boxes = m.boxes.size(0);
  // Ultralytics' scale: the per-image loss x the batch (its loss.sum() * batch_size), x the ranks
  // (its loss *= world_size against DDP's mean) and x train.accumulate (it sums micro-batches). The
  // per-image loss is normalised by the whole global batch's target scores (ranks' sums), so that
  // any split of the batch over the ranks gives the same update (train.balance).
  return loss.total * m.loss_scale;
}

train::Metrics DetectTask::evaluate() {
  auto& m = *impl_;
  if (m.eval_data.empty()) return {};
  return evaluate_detection(m.rt, m.model, m.eval_data, m.settings.eval).metrics();
}

train::Metrics DetectTask::step_metrics() {
  if (!impl_->last_parts.defined()) return {};
  const at::Tensor parts = impl_->last_parts.to(at::kCPU, at::kDouble);  // one read for the three
  return {{"box_loss", parts[0].item<double>()},
          {"cls_loss", parts[1].item<double>()},
          {"dfl_loss", parts[2].item<double>()},
          {"boxes", double(impl_->last_boxes)}};
}

}  // namespace meridian::tasks
