// The siglip task's spec: SigLIP / CLIP image-text training, Hugging Face SiglipModel in and out.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "../specs.h"
#include "meridian/core/error.h"
#include "meridian/models/siglip.h"
#include "meridian/tasks/siglip_hf.h"
#include "meridian/tasks/siglip_task.h"

namespace meridian::tasks {

namespace {

ModelSummary summarize_siglip(const Config& config, int64_t image_size) {
  if (image_size != 0) throw UserError("--image-size does not apply to task siglip (its size is model.image_size)");
  const auto mc = models::SiglipConfig::from_config(config);
  models::Siglip model(mc);
  return summarize_module(
      "siglip", *model, mc.flops_per_sample(),
      fmt::format("an image of {}x{} and a caption of {} tokens", mc.image_size, mc.image_size, mc.context_length));
}

std::string export_siglip_checkpoint(const std::string& checkpoint, const ExportOptions& o) {
  return export_siglip(checkpoint, o.out, o.dtype, o.max_shard_bytes, o.tokenizer)
      .summary(o.dtype, o.out, "SiglipModel");
}

}  // namespace

const TaskSpec& siglip_spec() {
  static const TaskSpec spec = [] {
    TaskSpec s;
    s.name = "siglip";
    s.summary = "image-text";
    s.declare = SiglipTask::declare;
    s.hf_model_type = "siglip";
    s.init_config_keys = models::siglip_config_keys;
    s.make = make_task<SiglipTask>;
    s.summarize = summarize_siglip;
    s.metrics = {"i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10", "zero_shot", "mR"};
    s.evaluate = SiglipTask::evaluate;
    s.predict = predict_siglip;
    s.export_checkpoint = export_siglip_checkpoint;
    return s;
  }();
  return spec;
}

}  // namespace meridian::tasks
