// Shared by the checkpoint MPI tests (one executable): a small Llama trained on random tokens, as a
// train::Task, and a trainer around it; a scratch directory named by rank 0, used by every rank; a
// checkpoint of such a run.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <memory>
#include <string>

#include "meridian/ckpt/checkpoint.h"
#include "meridian/core/config.h"
#include "meridian/models/llama.h"
#include "meridian/train/trainer.h"
#include "mpi_test_main.h"

namespace meridian::test {

inline models::LlamaConfig tiny_llama() {
  models::LlamaConfig c;
  c.vocab_size = 97, c.dim = 32, c.layers = 3, c.heads = 4, c.kv_heads = 2, c.hidden = 48, c.max_seq_len = 16;
  return c;
}

// Next-token loss of a small Llama on random tokens, drawn from (rank, batch number): a resumed run
// sees the batches a straight one does once `batches` is set to the steps done.
class TinyLm : public train::Task {
 public:
  TinyLm() : model_(tiny_llama()) {}
  std::string name() const override { return "tiny-lm"; }
  std::shared_ptr<torch::nn::Module> model() override { return model_.ptr(); }
  int64_t batch_size() const override { return 2; }
  double flops_per_sample() const override { return 1; }
  void next_batch() override {
    auto gen = at::detail::createCPUGenerator(uint64_t(1000 * runtime().rank() + batches_++));
    tokens_ = at::randint(97, {2, 9}, gen, at::kLong);
  }
  at::Tensor forward() override {
    const auto logits = model_->forward(tokens_.narrow(1, 0, 8));
    return at::cross_entropy_loss(logits.reshape({-1, 97}), tokens_.narrow(1, 1, 8).reshape({-1}));
  }
  nn::BlockRunner* blocks() override { return &model_->blocks(); }
  train::DataPosition data_position() const override { return {0, batches_}; }
  int64_t batches_ = 0;

 private:
  models::Llama model_;
  at::Tensor tokens_;
};

inline std::string temp_dir() { return meridian::test::shared_temp_dir("meridian-strategy"); }

struct Run {
  std::unique_ptr<TinyLm> task;
  std::unique_ptr<train::Trainer> trainer;
};

inline Run make_run(const std::string& optim, int64_t steps, int64_t stop_at, uint64_t seed) {
  const Config config =
      Config::parse("train: {steps: " + std::to_string(steps) + ", stop_at: " + std::to_string(stop_at) +
                        ", log_every: 100, health_every: 0}\noptim: {" + optim + ", lr: 0.01, warmup: 2, clip: 0.5}\n",
                    "strategy.yaml");
  train::seed(seed);
  Run r;
  r.task = std::make_unique<TinyLm>();
  r.trainer = std::make_unique<train::Trainer>(runtime(), *r.task, train::TrainerSettings::from_config(config),
                                               train::TrainerOptions{config, "", {}, ""});
  return r;
}

// Collective: trains a run of `steps` steps and saves it into `dir`; returns the checkpoint's path.
inline std::string train_and_save(const std::string& optim, int64_t steps, uint64_t seed, const std::string& dir) {
  auto run = make_run(optim, steps, 0, seed);
  run.trainer->run();
  ckpt::CheckpointSettings cs;
  cs.dir = dir;
  return ckpt::save(runtime(), *run.trainer, Config::parse("{}", "saved.yaml"), cs);
}

}  // namespace meridian::test
