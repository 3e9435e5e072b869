#include "meridian/tasks/detect_task.h"

#include <spdlog/spdlog.h>
#include <torch/nn/functional.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "meridian/ckpt/checkpoint.h"
#include "meridian/ckpt/file.h"
#include "meridian/comm/communicator.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/config_binding.h"
#include "meridian/core/error.h"
#include "meridian/core/files.h"
#include "meridian/data/dataset_reader.h"
#include "meridian/data/detection_loader.h"
#include "meridian/data/format.h"
#include "meridian/data/image_input.h"
#include "meridian/data/loader.h"
#include "meridian/detect/loss.h"
#include "meridian/tasks/registry.h"
#include "meridian/train/settings.h"

namespace meridian::tasks {

namespace {
// A results JSON image_id as Ultralytics writes one: COCO's id when the dataset has it, else the
// file name's stem, as a number when it is one.
nlohmann::json coco_image_id(int64_t id, const std::string& name) {
  if (id >= 0) return id;
  const std::string stem = std::filesystem::path(name).stem().string();
  if (!stem.empty() && stem.size() < 19 &&
      std::all_of(stem.begin(), stem.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::stoll(stem);
  return stem;
}
double rounded(double x, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(x * scale) / scale;
}

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
    b.number("task.conf", eval(&DetectEvalOptions::conf), "evaluation: minimum confidence of a detection")
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

std::string ultralytics_auto(Config& c, int64_t images, int world_size) {
  const std::string why = "optim.name auto (Ultralytics' rule)";
  c.set("optim.name", "auto", why);  // until decided: the settings below read it as auto, not as adamw
  const auto t = train::TrainerSettings::from_config(c);
  const int64_t batch = DetectSettings::from_config(c).batch * world_size;  // Ultralytics' batch: images per iteration
  const int64_t n = std::max<int64_t>(1, images), classes = models::YoloConfig::from_config(c).num_classes;
  // Ultralytics accumulates gradients up to its nominal 64 images per step (accumulate = round(64 / B)).
  const int64_t accumulate =
      c.has("train.accumulate") ? t.accumulate : std::max<int64_t>(1, int64_t(std::nearbyint(64.0 / double(batch))));
  const int64_t steps_per_epoch = (n + batch * accumulate - 1) / (batch * accumulate);
  const double epochs = t.epochs > 0 ? t.epochs : double(t.steps) * double(batch * accumulate) / double(n);
  const double iterations = std::ceil(double(n) / double(std::max<int64_t>(batch, 64))) * epochs;
  const bool sgd = iterations > 10000;
  const double lr = sgd ? 0.01 : std::nearbyint(0.002 * 5.0 / double(4 + classes) * 1e6) / 1e6;
  std::string chosen, kept;
  const auto set = [&](const std::string& key, const std::string& value) {
    if (c.has(key)) return void(kept += (kept.empty() ? "" : ", ") + key + " " + c.text(key));
    c.set(key, value, why);
    chosen += (chosen.empty() ? "" : ", ") + key + " " + value;
  };
  c.set("optim.name", sgd ? "sgd" : "adamw", why);
  set("train.accumulate", std::to_string(accumulate));
  set("optim.lr", fmt::format("{}", lr));
  if (sgd) set("optim.momentum", "0.9"), set("optim.warmup_bias_lr", "0.1");
  if (!sgd && c.has("optim.warmup_bias_lr") && c.get<double>("optim.warmup_bias_lr") > 0) {
    c.set("optim.warmup_bias_lr", "0", why);  // as Ultralytics: no bias warmup with AdamW
    chosen += (chosen.empty() ? "" : ", ") + std::string("optim.warmup_bias_lr 0 (AdamW)");
  }
  set("optim.weight_decay", fmt::format("{}", 5e-4 * double(batch * accumulate) / 64.0));
  if (!c.has("optim.warmup_ratio"))
    set("optim.warmup", std::to_string(std::max<int64_t>(100, int64_t(std::nearbyint(3.0 * double(steps_per_epoch))))));
  set("optim.schedule", "linear");
  set("optim.min_lr", fmt::format("{}", c.get<double>("optim.lr") * 0.01));
  set("optim.clip", "10.0");
  set("train.ema", "0.9999");
  set("train.ema_tau", "2000");
  return fmt::format(
      "optim.name auto: {} ({:.0f} iterations of max({}, 64) images over {:.1f} epochs {} 10,000; {} classes){}{}{}{}",
      sgd ? "sgd" : "adamw", iterations, batch, epochs, sgd ? ">" : "<=", classes, chosen.empty() ? "" : "; set ",
      chosen, kept.empty() ? "" : "; given by the config: ", kept);
}

train::Metrics DetectEval::metrics() const {
  return {{"map50", 100 * std::max(0.0, map.map50)},
          {"map50_95", 100 * std::max(0.0, map.map50_95)},
          {"images", double(images)},
          {"detections", double(detections)}};
}

std::string DetectEval::per_class() const {
  std::string s;
  char line[160];
  for (size_t c = 0; c < map.ap50.size(); ++c) {
    const std::string name = c < class_names.size() ? class_names[c] : std::to_string(c);
    if (map.num_gt[c] == 0)
      std::snprintf(line, sizeof line, "  %-20s %7lld boxes\n", name.c_str(), (long long)0);
    else
      std::snprintf(line, sizeof line, "  %-20s %7lld boxes  AP50 %5.1f  AP50-95 %5.1f\n", name.c_str(),
                    (long long)map.num_gt[c], 100 * map.ap50[c], 100 * map.ap50_95[c]);
    s += line;
  }
  return s;
}

at::Tensor detection_input(const at::Tensor& images, const c10::Device& device) {
  at::Tensor x = images.size(-1) == 3 && images.size(1) != 3 ? images.permute({0, 3, 1, 2}) : images;
  if (!device.is_cpu()) x = x.contiguous().pin_memory().to(device, /*non_blocking=*/true);
  return x.to(at::kFloat).div_(255.0).contiguous();
}

DetectEval evaluate_detection(const comm::Runtime& rt, models::Yolo& model, const std::string& path,
                              const DetectEvalOptions& o) {
  if (!o.save_json.empty()) {  // before the work: a path that cannot be written fails now, on every rank
    const auto dir = std::filesystem::absolute(o.save_json).parent_path();
    if (!std::filesystem::is_directory(dir))
      throw UserError("task.save_json: " + o.save_json + ": the directory " + dir.string() + " does not exist");
  }
  at::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  data::DatasetReader reader(path, data::IoDriver::POSIX);
  const auto& info = reader.info();
  if (info.kind != "detection") throw DataError(path, "kind", "detection evaluation needs a detection dataset");
  if (info.height != info.width)
    throw DataError(path, "/images",
                    "images of " + std::to_string(info.height) + " x " + std::to_string(info.width) +
                        ": detection evaluation needs square (letterboxed) images, as prep detection writes");
  const int64_t classes = model->config().num_classes;
  if (int64_t(info.class_names.size()) > classes)
    throw DataError(
        path, "class_names",
        std::to_string(info.class_names.size()) + " classes, more than the model's " + std::to_string(classes));
  const int64_t n = info.count, stored = info.height, size = o.image_size > 0 ? o.image_size : stored;
  const int64_t share = (n + rt.size() - 1) / rt.size(), first = std::min(n, rt.rank() * share),
                last = std::min(n, first + share);
  const auto device = rt.device();
  detect::MapAccumulator acc;
  DetectEval r;
  r.class_names = info.class_names;
  int64_t detections = 0;
  nlohmann::json results = nlohmann::json::array();  // this rank's share of --save-json
  for (int64_t a = first; a < last; a += o.batch) {
    const int64_t m = std::min(o.batch, last - a);
    std::vector<int64_t> rows(m);
    for (int64_t i = 0; i < m; ++i) rows[i] = a + i;
    auto images = at::empty({m, info.height, info.width, 3}, at::kByte);
    reader.read_rows(rows, images.data_ptr<uint8_t>(), nullptr, nullptr, nullptr);
    at::Tensor x = detection_input(images, device);
    if (size != stored) {
      namespace F = torch::nn::functional;
      x = F::interpolate(x, F::InterpolateFuncOptions()
                                .size(std::vector<int64_t>{size, size})
                                .mode(torch::kBilinear)
                                .align_corners(false));
    }
    const auto found =
        detect::decode(model->forward(x), model->strides(), model->config().reg_max, o.conf, o.iou, o.max_det);
    const auto truth = reader.read_boxes(rows, /*evaluation=*/true);
    for (int64_t i = 0; i < m; ++i) {
      const auto& gt = truth[size_t(i)];
      const int w0 = gt.original_size[0] > 0 ? gt.original_size[0] : int(stored);
      const int h0 = gt.original_size[1] > 0 ? gt.original_size[1] : int(stored);
      const data::Letterbox lb = data::letterbox_geometry(w0, h0, int(stored));
      // Ground truth in original pixels: the instances, then the crowd regions (flagged); areas as
      // recorded (COCO's), else the boxes' own.
      const size_t instances = gt.boxes.size(), all_gt = instances + gt.crowd.size();
      std::vector<float> gt_flat, gt_area;
      std::vector<int64_t> gt_class;
      std::vector<uint8_t> gt_crowd;
      for (size_t b = 0; b < all_gt; ++b) {
        const bool crowd = b >= instances;
        const auto o = data::unplace_box(lb, w0, h0, crowd ? gt.crowd[b - instances] : gt.boxes[b]);
        gt_flat.insert(gt_flat.end(), o.begin(), o.end());
        gt_class.push_back(crowd ? gt.crowd_classes[b - instances] : gt.classes[b]);
        gt_crowd.push_back(crowd);
        gt_area.push_back(!crowd && b < gt.areas.size() ? gt.areas[b] : (o[2] - o[0]) * (o[3] - o[1]));
      }
      const int64_t G = int64_t(all_gt);
      const auto gt_boxes = at::from_blob(gt_flat.data(), {G, 4}, at::kFloat).clone();
      const auto gt_classes = at::from_blob(gt_class.data(), {G}, at::kLong).clone();
      const auto gt_crowd_t = at::from_blob(gt_crowd.data(), {G}, at::kByte).clone();
      const auto gt_areas = at::from_blob(gt_area.data(), {G}, at::kFloat).clone();
      const auto& d = found[size_t(i)];
      const auto scores = d.scores.cpu().to(at::kFloat).contiguous();
      const auto classes = d.classes.cpu().to(at::kLong).contiguous();
      const auto stored_boxes = (d.boxes.cpu() * (double(stored) / double(size))).to(at::kFloat).contiguous();
      auto det_boxes = at::empty_like(stored_boxes);
      const nlohmann::json image_id =
          o.save_json.empty() ? nlohmann::json() : coco_image_id(gt.image_id, reader.name(rows[size_t(i)]));
      for (int64_t j = 0; j < det_boxes.size(0); ++j) {
        const float* p = stored_boxes.data_ptr<float>() + 4 * j;
        const auto box = data::unplace_box(lb, w0, h0, {p[0], p[1], p[2], p[3]});
        std::copy(box.begin(), box.end(), det_boxes.data_ptr<float>() + 4 * j);
        if (o.save_json.empty()) continue;
        const int64_t c = classes.data_ptr<int64_t>()[j];
        const bool coco = !info.class_ids.empty();
        if (coco && c >= int64_t(info.class_ids.size())) continue;  // a model class the dataset has no category for
        results.push_back(
            {{"image_id", image_id},
             {"category_id", coco ? info.class_ids[size_t(c)] : c},
             {"bbox",
              {rounded(box[0], 3), rounded(box[1], 3), rounded(box[2] - box[0], 3), rounded(box[3] - box[1], 3)}},
             {"score", rounded(scores.data_ptr<float>()[j], 5)}});
      }
      acc.add_image(gt_boxes, gt_classes, det_boxes, scores, classes, gt_crowd_t, gt_areas);
      r.boxes += int64_t(instances);
      detections += scores.size(0);
    }
  }
  if (!o.save_json.empty()) {  // every rank's detections to rank 0, one rank at a time, in rank (= image) order
    std::string all = "[";
    rt.stream_to_root(results.dump(), [&](int, const std::string& part) {
      if (part.size() <= 2) return;  // "[]"
      if (all.size() > 1) all += ",";
      all.append(part, 1, part.size() - 2);
    });
    if (rt.rank() == 0) write_file_atomically(o.save_json, all + "]");
  }
  // Every rank's matches to every rank (in rank order = image order), and every rank scores them.
  const auto all = rt.allgather(acc.serialize());
  detect::MapAccumulator merged;
  for (const auto& bytes : all) merged.merge(bytes);
  r.map = merged.compute(int(classes));
  r.images = merged.num_images();
  r.boxes = rt.sum(r.boxes);
  r.detections = rt.sum(detections);
  if (was_training) model->train();
  return r;
}

struct DetectTask::Impl {
  const comm::Runtime& rt;
  models::YoloConfig mc;
  DetectSettings settings;
  std::string eval_data;
  int64_t image_size = 0;
  std::unique_ptr<data::DetectionLoader> loader;
  std::unique_ptr<comm::Communicator> bn_comm;  // model.sync_bn: SyncBatchNorm's own (outlives the model)
  models::Yolo model{nullptr};
  at::Tensor images, boxes, classes, offsets;  // the current batch (images on the device)
  train::DataPosition position;
  train::Metrics last_parts;
  double loss_scale = 1;  // ranks x train.accumulate: Ultralytics' loss *= world_size and its summed accumulation

  Impl(const comm::Runtime& runtime, const Config& c, const std::string& train_data, train::DataPosition start)
      : rt(runtime),
        settings(DetectSettings::from_config(c)),
        eval_data(DataSettings::from_config(c).eval),
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

    const auto trainer = train::TrainerSettings::from_config(c);
    loss_scale = double(rt.size()) * double(trainer.accumulate);
    data::DetectionLoaderOptions lo;
    lo.path = train_data;
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

std::vector<ImageDetection> detect_image(models::Yolo& model, const cv::Mat& rgb, const DetectEvalOptions& options,
                                         const c10::Device& device) {
  const int64_t size = options.image_size;
  const auto lb = data::letterbox(rgb, int(size));
  const auto letterboxed = at::from_blob(lb.image.data, {size, size, 3}, at::kByte);  // lb.image's pixels
  const auto found = detect::decode(model->forward(detection_input(letterboxed.unsqueeze(0), device)), model->strides(),
                                    model->config().reg_max, options.conf, options.iou, options.max_det)[0];
  const auto b = found.boxes.cpu().to(at::kDouble), s = found.scores.cpu().to(at::kDouble), k = found.classes.cpu();
  std::vector<ImageDetection> out;
  for (int64_t j = 0; j < b.size(0); ++j) {
    const auto o = data::unplace_box(lb, rgb.cols, rgb.rows,
                                     {float(b[j][0].item<double>()), float(b[j][1].item<double>()),
                                      float(b[j][2].item<double>()), float(b[j][3].item<double>())});
    out.push_back({k[j].item<int64_t>(), s[j].item<double>(), o[0], o[1], o[2], o[3]});
  }
  return out;
}

void DetectTask::declare(ConfigSchema& schema) {
  models::YoloConfig::declare(schema);
  DetectSettings::declare(schema);
}

CheckpointEval DetectTask::evaluate_checkpoint(const comm::Runtime& rt, const ckpt::Reader& reader,
                                               const Config& config, const std::string& data_path) {
  models::Yolo model(models::YoloConfig::from_config(config));
  ckpt::load_module(reader.path(), *model);
  model->to(rt.device());
  const auto r = evaluate_detection(rt, model, data_path, DetectEvalOptions::from_config(config));
  return {std::to_string(r.images) + " images, " + std::to_string(r.boxes) + " boxes, " + std::to_string(r.detections) +
              " detections",
          r.per_class(),
          {{"map50", 100 * std::max(0.0, r.map.map50)},
           {"map50_95", 100 * std::max(0.0, r.map.map50_95)},
           {"map75", 100 * std::max(0.0, r.map.map75)},
           {"map_small", 100 * r.map.map_small},  // -1 (printed -100): no ground truth of that size
           {"map_medium", 100 * r.map.map_medium},
           {"map_large", 100 * r.map.map_large}}};
}

DetectTask::DetectTask(const comm::Runtime& rt, const Config& config, const std::string& train_data,
                       train::DataPosition start)
    : impl_(std::make_unique<Impl>(rt, config, train_data, start)) {}
DetectTask::~DetectTask() = default;

std::shared_ptr<torch::nn::Module> DetectTask::model() { return impl_->model.ptr(); }
int64_t DetectTask::batch_size() const { return impl_->settings.batch; }
double DetectTask::flops_per_sample() const { return impl_->model->flops(impl_->image_size); }
train::DataPosition DetectTask::data_position() const { return impl_->position; }
int64_t DetectTask::batches_per_epoch() const { return impl_->loader->sampler().steps_per_epoch(); }

void DetectTask::next_batch() {
  auto& m = *impl_;
  const data::DetectionBatch b = m.loader->next();
  m.position = {b.epoch, b.next_position};
  const auto device = m.rt.device();
  m.images = detection_input(b.images, device);
  m.boxes = b.boxes.to(device);
  m.classes = b.classes.to(device);
  m.offsets = b.box_offsets;  // read on the host by the assigner
}

at::Tensor DetectTask::forward() {
  auto& m = *impl_;
  auto levels = m.model->forward(m.images);
  for (auto& l : levels) l = l.to(at::kFloat);  // the loss in float32 under bf16 autocast
  const auto loss = detect::detection_loss(levels, m.model->strides(), m.boxes, m.classes, m.offsets, m.settings.loss);
  m.last_parts = {{"box_loss", loss.box.item<double>()},
                  {"cls_loss", loss.cls.item<double>()},
                  {"dfl_loss", loss.dfl.item<double>()},
                  {"boxes", double(m.boxes.size(0))}};
  // Ultralytics' scale: the per-image loss x the rank's batch (its loss.sum() * batch_size), x the
  // ranks (its loss *= world_size against DDP's mean) and x train.accumulate (it sums micro-batches).
  return loss.total * m.loss_scale;
}

train::Metrics DetectTask::evaluate() {
  auto& m = *impl_;
  if (m.eval_data.empty()) return {};
  return evaluate_detection(m.rt, m.model, m.eval_data, m.settings.eval).metrics();
}

train::Metrics DetectTask::step_metrics() { return impl_->last_parts; }

}  // namespace meridian::tasks
