// Training a SigLIP model on an image-text dataset, data-parallel (first cut of the trainer:
// no checkpoints or evaluation yet).
//
// Collective: every rank calls train_siglip with the same options. Each rank reads its share of
// every global batch (data::Loader), computes its images' sigmoid loss against all ranks' texts
// (the gather on a communicator of its own), and DistributedDataParallel averages the gradients
// while backward runs. AdamW with linear warmup then cosine decay.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meridian/core/config.h"

namespace meridian::comm {
class Runtime;
}

namespace meridian::train {

struct TrainOptions {
  Config config;          // `model:` (models::SiglipConfig) and `train:` sections
  std::string data;       // image_text dataset (.h5)
  std::string run_dir;    // logs go there (may be empty)
};

// The `train:` section, with defaults; ConfigError names the field.
struct TrainSettings {
  int64_t batch = 32;        // per rank
  int64_t steps = 100;
  double lr = 5e-4, min_lr = 1e-5, weight_decay = 1e-4, clip = 1.0;
  int64_t warmup = 10;
  int64_t log_every = 10;
  uint64_t seed = 0;
  bool augment = false;
  std::string eval_data;     // image_text dataset evaluated after training (empty: none)
  static TrainSettings from_config(const Config& config);
};

// Retrieval over a whole dataset (every image against every caption) and zero-shot
// classification with the prompt "a satellite photo of a <class>." (classes from the file).
struct EvalResult {
  int64_t images = 0, captions = 0;
  double image_to_text[3] = {0, 0, 0};  // recall@1, @5, @10 in %: an image's own caption among the top k
  double text_to_image[3] = {0, 0, 0};  // recall@1, @5, @10 in %: a caption's image among the top k
  double zero_shot_top1 = -1;           // % of labelled images; -1 without classes
};

struct TrainReport {
  std::vector<double> losses;   // per step, mean over ranks
  double samples_per_s = 0;     // global, over the steps after the first
  int64_t parameters = 0;
  double flops_per_sample = 0;
  bool evaluated = false;
  EvalResult eval;              // when train.eval_data is set: after the last step
};

TrainReport train_siglip(const comm::Runtime& runtime, const TrainOptions& options);

}  // namespace meridian::train
