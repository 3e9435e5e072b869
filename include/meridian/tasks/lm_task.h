// Language-model fine-tuning (SFT) as a train::Task: a Llama-style decoder (models::Llama) on a
// `text` dataset (data::TextLoader), next-token cross-entropy on the response tokens only.
//
// Config (besides `model:`, models::LlamaConfig):
//   train.batch        sequences per rank per micro-step (8)
//   data.seq_len       tokens per sequence (model.max_seq_len if unset)
//   data.mode          pack (windows of the token stream, default) | pad (one document per sequence)
//   data.eval          a text dataset whose loss and perplexity Task::evaluate reports (none: no evaluation)
//   task.init          weights to start from: a Hugging Face LlamaForCausalLM directory (its
//                      config.json sets the model: keys; shards, F32/BF16/F16, read tensor by tensor) or
//                      one .safetensors file with Hugging Face names; optional
#pragma once

#include <memory>
#include <string>

#include "meridian/core/config_schema.h"
#include "meridian/data/text_loader.h"
#include "meridian/models/llama.h"
#include "meridian/tasks/checkpoint_eval.h"
#include "meridian/tasks/model_source.h"
#include "meridian/tasks/spec.h"
#include "meridian/train/settings.h"
#include "meridian/train/task.h"
#include "meridian/train/zero.h"

namespace meridian::comm {
class Runtime;
class Communicator;
}  // namespace meridian::comm

namespace meridian::ckpt {
class Reader;
}

namespace meridian::tasks {

// The lm task's own keys (train.batch, data.seq_len, data.mode, task.init), each bound once: `declare`
// puts them in a schema, `from_config` fills the struct (unset keys: these defaults). Not collective.
struct LmSettings {
  int64_t batch = 8;
  int64_t seq_len = 0;  // 0: model.max_seq_len
  data::TextLoaderOptions::Mode mode = data::TextLoaderOptions::Pack;
  std::string init;  // "": random weights
  static void declare(ConfigSchema& schema);
  static LmSettings from_config(const Config& config);
};

// Not collective: the closed-form memory per rank of training `model` on `world` ranks with ZeRO
// stage `stage` (0: DistributedDataParallel + AdamW), float32 or bfloat16 parameters (2 bytes;
// float32 master shards), before activations: a unit per decoder layer, the embedding, final norm
// and head outside blocks (what train::ShardedAdamW builds for this model). With `lora` enabled:
// only the adapters are trained (a unit per layer) and the base is frozen, replicated, in the
// parameters' dtype (bfloat16 with train.precision bf16 and optim.zero). offload: stage 3's state in
// host memory (optim.offload).
train::ZeroMemoryReport lm_memory(const models::LlamaConfig& model, int stage, int64_t world,
                                  int64_t parameter_element_bytes = 4, const models::LoraConfig* lora = nullptr,
                                  bool offload = false);

// Not collective: the Llama of a checkpoint written by an lm run (its config, the vocabulary it
// trained with, LoRA adapters when task.lora.rank > 0), weights loaded; `saved` (optional) gets the
// run's config. DataError as ckpt::Reader; UserError naming the file for another task's checkpoint.
models::Llama load_lm(const std::string& checkpoint, Config* saved = nullptr);
// Not collective: `checkpoint`'s weights with every LoRA adapter merged into its layer (W + alpha/r
// B A), written to `out` as safetensors with Hugging Face Llama names and no lora_* entries (the
// same file as for a run without adapters). Returns the number of tensors written.
int64_t export_merged(const std::string& checkpoint, const std::string& out);

// The language-model loss over a whole text dataset.
struct LmEval {
  double loss = 0;                 // mean cross-entropy per target token with loss (all ranks)
  int64_t tokens = 0;              // target tokens with loss
  int64_t windows = 0;             // pack windows of seq_len evaluated
  train::Metrics metrics() const;  // eval_loss, eval_perplexity, eval_tokens
};

// Collective: every rank evaluates its share of `path`'s pack windows of `seq_len` tokens (data::
// TextLoader, batch 1: windows beyond a multiple of the ranks are left out), no gradients, the
// model's mode restored; the sums are added on `comm` (a CPU communicator) so every rank returns the
// same result. DataError/UserError as TextLoader.
LmEval evaluate_lm(const comm::Runtime& runtime, comm::Communicator& comm, models::Llama& model,
                   const std::string& path, int64_t seq_len);

// Not collective: the Llama of `model` (an lm checkpoint, LoRA adapters as trained: load_lm; or a
// Hugging Face LlamaForCausalLM directory: load_hf_llama in float32) on `device`. `report`: log
// what was skipped.
models::Llama lm_model(const ModelSource& model, c10::Device device, bool report);

// Not collective: `bench memory`'s table of lm_memory for `config`'s Llama (TaskSpec::memory_table).
std::string lm_memory_table(const Config& config, const std::vector<int64_t>& ranks, int64_t lora_rank);

// Not collective: `meridian generate` with an lm model on `device` (TaskSpec::generate): the prompt in
// options.chat_template (alpaca for a checkpoint, none for a published model by default), with the
// tokenizer of options.tokenizer, else the published directory's tokenizer.model, else the run's
// data.train. UserError for no tokenizer or an unknown template; DataError as the tokenizer's.
GenerateResult generate_lm(const ModelSource& model, const GenerateOptions& options, const c10::Device& device);

class LmTask : public train::Task {
 public:
  // Collective: opens the data (every rank the same file), builds the model on the runtime's device
  // (model.vocab_size raised to the tokenizer's if smaller), loads task.init if given (checks it
  // and defers the reading with optim.zero 3: defers_weights()).
  LmTask(const comm::Runtime& runtime, const Config& config, const train::TrainerSettings& trainer,
         const std::string& train_data, train::DataPosition start = {});
  // Declares this task's keys: its model:, task: and data: keys and train.batch (tasks::config_schema).
  static void declare(ConfigSchema& schema);
  // Collective: TaskSpec::evaluate of this task (evaluate_lm of lm_model at the config's
  // data.seq_len; 0: the model's max_seq_len).
  static CheckpointEval evaluate(const comm::Runtime& runtime, const ModelSource& model, const std::string& data_path);
  ~LmTask() override;

  std::string name() const override { return "lm"; }
  std::shared_ptr<torch::nn::Module> model() override;
  nn::BlockRunner* blocks() override;  // the decoder layers
  int64_t batch_size() const override;
  double flops_per_sample() const override;   // per sequence of seq_len tokens
  double tokens_per_sample() const override;  // seq_len (every position is computed, padded or not)
  void next_batch() override;
  at::Tensor batch_rows() const override;
  void set_shares(const std::vector<int64_t>& shares) override;
  at::Tensor forward() override;  // cross-entropy summed over this rank's target tokens / the ranks' mean count
  bool decays(const std::string& name, const at::Tensor& parameter) const override;
  train::Metrics evaluate() override;      // eval_loss, eval_perplexity (token-weighted over all ranks)
  train::Metrics step_metrics() override;  // tokens with loss in the last batch (this rank), perplexity
  train::DataPosition data_position() const override;
  int64_t batches_per_epoch() const override;
  // With optim.zero 3 and no LoRA, from task.init or resuming: the model is built shape-only, and
  // assign_weights() reads task.init into the strategy's shards unit by unit (resuming: the
  // checkpoint's restore does).
  bool defers_weights() const override;
  void assign_weights(train::Strategy& strategy) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace meridian::tasks
