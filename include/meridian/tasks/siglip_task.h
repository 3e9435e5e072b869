// SigLIP (or CLIP) image-text training as a train::Task, and its evaluation: retrieval recall@K
// both ways and zero-shot classification over an image-text dataset.
//
// Config (besides `model:`, models::SiglipConfig):
//   train.batch        samples per rank per micro-step (32)
//   task.loss          sigmoid (SigLIP, default) | softmax (CLIP)
//   task.prompts       zero-shot templates, "{}" = the class name ("_" read as " "); class
//                      embeddings are the normalised mean over templates
//   data.augment       random resized crop + flip (false)
//   data.eval          image_text dataset for Task::evaluate (none: no evaluation)
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "meridian/core/config_schema.h"
#include "meridian/data/tokenizer.h"
#include "meridian/models/siglip.h"
#include "meridian/tasks/checkpoint_eval.h"
#include "meridian/tasks/model_source.h"
#include "meridian/train/settings.h"
#include "meridian/train/task.h"

namespace meridian::comm {
class Runtime;
class Communicator;
}  // namespace meridian::comm

namespace meridian::ckpt {
class Reader;
}

namespace meridian::tasks {

// Retrieval over a whole dataset (every image against every caption) and zero-shot
// classification (classes from the file's class_names, labels from /labels).
struct SiglipEval {
  int64_t images = 0, captions = 0;
  double image_to_text[3] = {0, 0, 0};  // recall@1, @5, @10 in %: an image's own caption among its top k
  double text_to_image[3] = {0, 0, 0};  // recall@1, @5, @10 in %: a caption's image among its top k
  double zero_shot_top1 = -1;           // % of labelled images; -1 without classes or labels
  train::Metrics metrics() const;       // i2t_r1 ... t2i_r10, zero_shot (when known)
};

// Collective: each rank embeds a contiguous share of the rows; embeddings are gathered on `comm`
// (a communicator on the model's device) so every rank returns the same result.
SiglipEval evaluate_siglip(const comm::Runtime& runtime, comm::Communicator& comm, models::Siglip& model,
                           const std::string& path, const std::vector<std::string>& prompts);

std::vector<std::string> default_prompts();

// Not collective: the zero-shot classifier of `classes` (names in words by data::class_words): each
// class's prompts (`prompts`, "{}" the name) encoded by `tokenizer` and `model` on `device`, the
// normalised mean over prompts. [classes, embed] float32 on `device`, unit rows.
at::Tensor class_embeddings(models::Siglip& model, const data::Tokenizer& tokenizer,
                            const std::vector<std::string>& classes, const std::vector<std::string>& prompts,
                            c10::Device device);

// The siglip task's own keys (train.batch, task.loss, task.prompts, task.init, data.augment,
// data.workers), each bound once: `declare` puts them in a schema, `from_config` fills the struct
// (unset keys: these defaults). Not collective.
struct SiglipSettings {
  int64_t batch = 32;
  bool softmax = false;  // task.loss: softmax (CLIP) instead of sigmoid (SigLIP)
  std::vector<std::string> prompts = default_prompts();
  std::string init;  // "": random weights
  bool augment = false;
  int64_t workers = 0;  // 0: data::loader_workers' default
  static void declare(ConfigSchema& schema);
  static SiglipSettings from_config(const Config& config);
};

class SiglipTask : public train::Task {
 public:
  // Collective: opens the training data (data::Loader checks every rank sees the same file), builds
  // the model on the runtime's device (model.vocab_size raised to the tokenizer's if smaller).
  // `start`: where the data resumes (from a checkpoint).
  SiglipTask(const comm::Runtime& runtime, const Config& config, const train::TrainerSettings& trainer,
             const std::string& train_data, train::DataPosition start = {});
  // Declares this task's keys: its model:, task: and data: keys and train.batch (tasks::config_schema).
  static void declare(ConfigSchema& schema);
  // Collective: TaskSpec::evaluate of this task (`model`: a checkpoint or a Hugging Face SiglipModel
  // directory; DataError when the dataset's tokenizer has more pieces than the model's vocabulary).
  static CheckpointEval evaluate(const comm::Runtime& runtime, const ModelSource& model, const std::string& data_path);
  ~SiglipTask() override;

  std::string name() const override;
  std::shared_ptr<torch::nn::Module> model() override;
  nn::BlockRunner* blocks() override;  // the vision then the text encoder blocks
  int64_t batch_size() const override;
  double flops_per_sample() const override;
  void next_batch() override;
  at::Tensor batch_rows() const override;
  void set_shares(const std::vector<int64_t>& shares) override;
  at::Tensor forward() override;
  bool decays(const std::string& name, const at::Tensor& parameter) const override;
  train::Metrics evaluate() override;
  train::Metrics step_metrics() override;
  train::DataPosition data_position() const override;
  int64_t batches_per_epoch() const override;

  models::Siglip& siglip();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// uint8 [B, S, S, 3] -> float [B, 3, size, size] in [-1, 1] (bilinear resize when S != size).
at::Tensor image_input(const at::Tensor& images, int64_t size);

}  // namespace meridian::tasks
