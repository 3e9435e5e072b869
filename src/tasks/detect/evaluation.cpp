// The detect task's evaluation: COCO-style mAP with pycocotools' semantics in the original images'
// pixels, over every rank's share of a detection dataset, and one image's detections (predict).
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
#include "meridian/core/error.h"
#include "meridian/core/files.h"
#include "meridian/data/dataset_reader.h"
#include "meridian/data/format.h"
#include "meridian/data/image_input.h"
#include "meridian/detect/loss.h"
#include "meridian/tasks/detect_task.h"

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
}  // namespace

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
  if (!device.is_cpu() && x.is_cpu()) x = x.contiguous().pin_memory().to(device, /*non_blocking=*/true);
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
    // Multi-label, as Ultralytics' DetectionValidator (`yolo val`): a box may count for each class above
    // conf (predict, as its predictor, keeps the best class).
    const auto found = detect::decode(model->forward(x), model->strides(), model->config().reg_max, o.conf, o.iou,
                                      o.max_det, /*multi_label=*/true);
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
        // The float32 box and score that were scored, exactly (x + w gives back x2 in double), so that
        // pycocotools on the file gives these figures: Ultralytics' 3 and 5 decimals move an IoU by up
        // to ~1e-4 (a match flips when it is that close to a threshold) and make unequal scores tie.
        results.push_back(
            {{"image_id", image_id},
             {"category_id", coco ? info.class_ids[size_t(c)] : c},
             {"bbox",
              {double(box[0]), double(box[1]), double(box[2]) - double(box[0]), double(box[3]) - double(box[1])}},
             {"score", double(scores.data_ptr<float>()[j])}});
      }
      acc.add_image(gt_boxes, gt_classes, det_boxes, scores, classes, gt_crowd_t, gt_areas, gt.image_id);
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

models::Yolo detect_model(const ModelSource& source, c10::Device device) {
  models::Yolo model(models::YoloConfig::from_config(source.config));
  if (!source.published) {
    ckpt::load_module(source.path, *model);
  } else if (const auto kept = models::load_ultralytics_weights(*model, source.path); !kept.empty()) {
    throw UserError(source.path + ": its class head is for another number of classes than the model YAML's " +
                    std::to_string(model->config().num_classes) + " (" + kept.front() +
                    "): give the YAML it was trained as (--set model.yaml=...) or --set model.num_classes=N");
  }
  model->to(device);
  return model;
}

CheckpointEval DetectTask::evaluate(const comm::Runtime& rt, const ModelSource& source, const std::string& data_path) {
  models::Yolo model = detect_model(source, rt.device());
  const Config& config = source.config;
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

}  // namespace meridian::tasks
