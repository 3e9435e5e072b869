// The generic Trainer with a toy task (on the runtime's device: MERIDIAN_TEST_DEVICE=cuda runs it on
// a GPU with the NCCL backend, jobs/gpu-check.sh) (linear regression on closed-form data): schedule, settings
// errors, the NaN/Inf guard, gradient accumulation, parameter groups, bf16 autocast, the run
// files (config.yaml, metrics.csv, TensorBoard events read back), SGD with momentum warmup, and the
// model EMA (against a reference recomputed from per-step snapshots; evaluations on the EMA weights).
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "meridian/comm/communicator.h"
#include "meridian/comm/runtime.h"
#include "meridian/train/tensorboard.h"
#include "meridian/train/trainer.h"
#include "mpi_test_main.h"
#include "strategies.h"

using meridian::test::runtime;
namespace train = meridian::train;

namespace {

// y = x . (1, -2, 3, 0.5) + 0.25 on inputs that depend only on the global sample index, so a run's
// data is the same for any batch split. Rank r reads samples r * 1e6 + its running count.
class LinearTask : public train::Task {
 public:
  explicit LinearTask(int64_t batch) : batch_(batch), model_(torch::nn::Linear(4, 1)) {
    model_->to(runtime().device());
  }
  std::string name() const override { return "linear"; }
  std::shared_ptr<torch::nn::Module> model() override { return model_.ptr(); }
  int64_t batch_size() const override { return batch_; }
  double flops_per_sample() const override { return 8; }
  void next_batch() override {
    if (record_weights_) {  // the weights each step starts from (after any evaluation)
      std::vector<torch::Tensor> parts;
      for (const auto& p : model_->parameters()) parts.push_back(p.detach().reshape({-1}).clone());
      weights_at_next_batch_.push_back(torch::cat(parts));
    }
    const auto ids = torch::arange(next_, next_ + batch_, torch::kDouble) + 1e6 * runtime().rank();
    next_ += batch_;
    x_ = torch::stack({torch::sin(ids), torch::cos(0.7 * ids), torch::sin(1.3 * ids + 1), torch::cos(ids / 3)}, 1)
             .to(torch::kFloat);
    y_ = (torch::matmul(x_, torch::tensor({1.0f, -2.0f, 3.0f, 0.5f})).unsqueeze(1) + 0.25).to(runtime().device());
    x_ = x_.to(runtime().device());
  }
  at::Tensor forward() override {
    auto loss = torch::mse_loss(model_(x_), y_);
    const bool poison = nan_from_ >= 0 && forwards_ >= nan_from_ && forwards_ < nan_until_ &&
                        (nan_rank_ < 0 || nan_rank_ == runtime().rank());
    ++forwards_;
    if (slow_ms_ > 0 && runtime().rank() == runtime().size() - 1)
      std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms_));
    if (overflow_from_ >= 0 && forwards_ - 1 >= overflow_from_ && forwards_ - 1 < overflow_until_ &&
        runtime().rank() == overflow_rank_)
      return loss * 1e36;  // finite, but x any loss scale above 340 overflows float32: inf gradients
    return poison ? loss * std::nan("") : loss;
  }
  // Forward calls [from, until) on `rank` return a loss whose scaled gradient overflows (fp16).
  void overflow(int64_t from, int64_t until, int rank) {
    overflow_from_ = from, overflow_until_ = until, overflow_rank_ = rank;
  }
  train::Metrics evaluate() override {
    ++evaluations_;
    evaluated_.push_back(model_->weight[0][0].item<double>());
    return {{"weight0", model_->weight[0][0].item<double>()}};
  }
  // Forward calls [from, until) on `rank` (-1: all ranks) return NaN.
  void poison(int64_t from, int64_t until, int rank) { nan_from_ = from, nan_until_ = until, nan_rank_ = rank; }
  void slow_last_rank(int ms) { slow_ms_ = ms; }  // an injected straggler
  int evaluations_ = 0;
  std::vector<double> evaluated_;  // weight0 at each evaluation
  bool record_weights_ = false;    // batch = 1 micro-step per optimizer step: one entry per step
  std::vector<torch::Tensor> weights_at_next_batch_;

 private:
  int64_t batch_, next_ = 0, forwards_ = 0, nan_from_ = -1, nan_until_ = -1, overflow_from_ = -1, overflow_until_ = -1;
  int nan_rank_ = -1, slow_ms_ = 0, overflow_rank_ = -1;
  torch::nn::Linear model_;
  torch::Tensor x_, y_;
};

// Checked against the train:/optim: schema (types and ranges), then read (the checks across keys).
train::TrainerSettings settings(const std::string& yaml) {
  meridian::Config config = meridian::Config::parse(yaml, "test.yaml");
  meridian::ConfigSchema schema;
  train::TrainerSettings::declare(schema);
  schema.check(config);
  return train::TrainerSettings::from_config(config);
}

// Every parameter flattened into one tensor (copied).
torch::Tensor flat(torch::nn::Module& m) {
  std::vector<torch::Tensor> parts;
  for (const auto& p : m.parameters()) parts.push_back(p.detach().reshape({-1}).clone());
  return torch::cat(parts);
}

// The ConfigError message of settings(yaml), or "no error".
std::string message(const std::string& yaml) {
  try {
    settings(yaml);
  } catch (const meridian::ConfigError& e) {
    return std::string(e.what());
  }
  return std::string("no error");
}

std::string shared_temp_dir(const std::string& name) {
  char path[256] = {0};
  if (runtime().rank() == 0) {
    std::snprintf(path, sizeof path, "%s/meridian_%s_%d", std::filesystem::temp_directory_path().c_str(), name.c_str(),
                  getpid());
    std::filesystem::remove_all(path);
  }
  runtime().broadcast_bytes(path, sizeof path, 0);
  return path;
}

}  // namespace

TEST(Schedule, WarmupThenCosineToMinLr) {
  const auto s = settings("optim: {lr: 1.0, min_lr: 0.1, warmup: 4}\ntrain: {steps: 14}\n");
  EXPECT_DOUBLE_EQ(train::learning_rate(s, 0), 0.25);
  EXPECT_DOUBLE_EQ(train::learning_rate(s, 2), 0.75);
  EXPECT_DOUBLE_EQ(train::learning_rate(s, 4), 1.0);  // the peak right after warmup
  EXPECT_NEAR(train::learning_rate(s, 8), 0.1 + 0.45 * (1 + std::cos(M_PI * 4 / 9)), 1e-15);
  EXPECT_DOUBLE_EQ(train::learning_rate(s, 13), 0.1);  // the last step reaches min_lr
  const auto no_warmup = settings("optim: {lr: 2.0, min_lr: 0, warmup: 0}\ntrain: {steps: 3}\n");
  EXPECT_DOUBLE_EQ(train::learning_rate(no_warmup, 0), 2.0);
  EXPECT_NEAR(train::learning_rate(no_warmup, 1), 1.0, 1e-15);
  EXPECT_NEAR(train::learning_rate(no_warmup, 2), 0.0, 1e-15);
}

TEST(Schedule, LinearDecayIsUltralyticsLf) {
  // optim.schedule linear: a straight line from lr after the warmup to min_lr at the last step.
  const auto s = settings("optim: {lr: 1.0, min_lr: 0.01, warmup: 2, schedule: linear}\ntrain: {steps: 12}\n");
  EXPECT_DOUBLE_EQ(train::learning_rate(s, 0), 0.5);
  EXPECT_DOUBLE_EQ(train::learning_rate(s, 2), 1.0);
  EXPECT_NEAR(train::learning_rate(s, 5), 0.01 + 0.99 * 6.0 / 9.0, 1e-15);
  EXPECT_DOUBLE_EQ(train::learning_rate(s, 11), 0.01);
  // Ultralytics' warmup_bias_lr (SGD): the biases from 0.1 down to lr over the warmup, then as the rest.
  const auto b = settings("optim: {name: sgd, lr: 0.01, warmup: 4, warmup_bias_lr: 0.1}\ntrain: {steps: 10}\n");
  EXPECT_DOUBLE_EQ(train::bias_learning_rate(b, 0), 0.1);
  EXPECT_NEAR(train::bias_learning_rate(b, 2), 0.1 + (0.01 - 0.1) * 2 / 4, 1e-15);
  EXPECT_DOUBLE_EQ(train::bias_learning_rate(b, 4), train::learning_rate(b, 4));
  EXPECT_DOUBLE_EQ(train::bias_learning_rate(s, 0), train::learning_rate(s, 0));  // off: the same lr
}

TEST(Settings, ErrorsNameTheFileAndField) {
  EXPECT_EQ(message("train: {precision: fp8}"),
            "test.yaml line 1: field 'train.precision': expected one of float32, bf16, fp16 or auto, got 'fp8'");
  EXPECT_EQ(message("train: {accumulate: 0}"),
            "test.yaml line 1: field 'train.accumulate': expected an integer >= 1, got '0'");
  EXPECT_EQ(message("optim: {lr: 1e-3, min_lr: 1e-2}"),
            "test.yaml line 1: field 'optim.min_lr': must be within [0, optim.lr]");
  EXPECT_EQ(message("optim: {clip: -1}"), "test.yaml line 1: field 'optim.clip': expected a number >= 0, got '-1'");
  EXPECT_EQ(message("train:\n  steps: 3\n  max_bad_steps: x\n"),
            "test.yaml line 3: field 'train.max_bad_steps': expected an integer >= 1, got 'x'");
  EXPECT_EQ(message("train: {stesp: 5}"),
            "test.yaml line 1: field 'train.stesp': unknown key; did you mean 'train.steps'?");
}

// optim.zero: the same run with the AdamW state sharded (gradients reduce-scattered, the global norm
// from the shards, clipping active) follows the unsharded run to rounding; the NaN guard still
// skips a step on every rank.
TEST(Trainer, ZeroShardedStateMatchesUnsharded) {
  const std::string yaml = "train: {steps: 30, log_every: 1000, accumulate: 2}\noptim: {lr: 0.05, warmup: 3";
  // clip 0.5 unless `more` says otherwise
  auto run = [&](bool zero, train::TrainSummary& summary, const std::string& more = "") {
    train::seed(3);
    LinearTask task(4);
    task.poison(10, 12, 0);  // micro-steps 10 and 11 (optimizer step 5) on rank 0 only
    train::Trainer trainer(runtime(), task,
                           settings(yaml + (more.empty() ? ", clip: 0.5" : more) + (zero ? ", zero: true}" : "}")), {});
    EXPECT_EQ(dynamic_cast<train::ZeroAdamW*>(&trainer.strategy()) != nullptr, zero);
    EXPECT_EQ(dynamic_cast<train::DdpAdamW*>(&trainer.strategy()) != nullptr, !zero);
    summary = trainer.run();
    return flat(*task.model());
  };
  train::TrainSummary plain, sharded;
  const auto expected = run(false, plain);
  const auto got = run(true, sharded);
  EXPECT_EQ(sharded.bad_steps, 1);
  EXPECT_EQ(plain.bad_steps, 1);
  ASSERT_EQ(plain.losses.size(), sharded.losses.size());
  for (size_t i = 0; i < plain.losses.size(); ++i) {
    if (std::isnan(plain.losses[i])) {
      EXPECT_TRUE(std::isnan(sharded.losses[i])) << "step " << i;
      continue;
    }
    EXPECT_NEAR(sharded.losses[i], plain.losses[i], 1e-5 * (1 + std::abs(plain.losses[i]))) << "step " << i;
  }
  EXPECT_TRUE(torch::allclose(got.cpu(), expected.cpu(), 1e-5, 1e-6)) << got << "\n" << expected;
  // Clipping acts on the sharded update: without it the run ends elsewhere.
  train::TrainSummary unclipped;
  EXPECT_FALSE(torch::allclose(run(true, unclipped, ", clip: 0").cpu(), got.cpu(), 1e-3, 1e-4));
}

// A model with BatchNorm on rank-dependent data: each rank's running statistics move differently in
// forward; after every step they are the mean over ranks again, identical everywhere (checkpoints
// write each tensor's blocks from different ranks, and evaluation runs on every rank's share).
class NormTask : public train::Task {
 public:
  NormTask()
      : model_(torch::nn::Sequential(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4), torch::nn::Linear(4, 1))) {
    model_->to(runtime().device());
  }
  std::string name() const override { return "norm"; }
  std::shared_ptr<torch::nn::Module> model() override { return model_.ptr(); }
  int64_t batch_size() const override { return 6; }
  double flops_per_sample() const override { return 40; }
  void next_batch() override {
    torch::manual_seed(100 * ++batches_ + runtime().rank());
    x_ = (torch::randn({6, 3}) * (1 + runtime().rank()) + runtime().rank()).to(runtime().device());
  }
  at::Tensor forward() override {
    // Batch `poison_at` on rank 0 is NaN: its BatchNorm statistics too.
    if (batches_ == poison_at && runtime().rank() == 0) x_ = x_ * std::nan("");
    return model_->forward(x_).pow(2).mean();
  }
  torch::nn::Sequential model_;
  torch::Tensor x_;
  int batches_ = 0, poison_at = -1;
};

TEST(Trainer, BatchNormStatisticsAreTheSameOnEveryRank) {
  train::seed(5);
  NormTask task;
  train::Trainer trainer(runtime(), task,
                         settings("train: {steps: 4, log_every: 1000}\noptim: {lr: 0.01, warmup: 0}\n"), {});
  std::vector<torch::Tensor> before;
  for (const auto& b : task.model()->buffers()) before.push_back(b.clone());
  trainer.run();
  std::vector<torch::Tensor> parts;
  for (const auto& b : task.model()->buffers())
    if (b.is_floating_point()) parts.push_back(b.detach().reshape({-1}));
  const auto mine = torch::cat(parts).to(torch::kFloat).contiguous();
  EXPECT_GT((mine.cpu() - torch::cat({before[0], before[1]}).cpu().to(torch::kFloat)).abs().max().item<double>(), 1e-3);
  auto all = torch::empty({mine.numel() * runtime().size()}, mine.options());
  meridian::comm::make_communicator(runtime(), meridian::comm::default_backend(runtime()))->allgather(mine, all);
  for (int q = 0; q < runtime().size(); ++q)
    EXPECT_TRUE(torch::equal(all.narrow(0, q * mine.numel(), mine.numel()), mine))
        << "rank " << q << "'s BatchNorm statistics differ";
}

// A step skipped for a non-finite loss also drops the statistics its forward gathered: they stay
// finite (and the same on every rank) instead of NaN forever.
TEST(Trainer, SkippedStepPutsBatchNormStatisticsBack) {
  train::seed(6);
  NormTask task;
  task.poison_at = 3;
  train::Trainer trainer(runtime(), task,
                         settings("train: {steps: 5, log_every: 1000}\noptim: {lr: 0.01, warmup: 0}\n"), {});
  const auto summary = trainer.run();
  EXPECT_EQ(summary.bad_steps, 1);
  for (const auto& b : task.model()->buffers())
    if (b.is_floating_point()) EXPECT_TRUE(torch::isfinite(b).all().item<bool>()) << b;
}

TEST(Trainer, LossFallsAndParameterGroupsSplitDecay) {
  train::seed(1);
  LinearTask task(8);
  train::Trainer trainer(runtime(), task,
                         settings("train: {steps: 150, log_every: 1000}\noptim: {lr: 0.1, warmup: 5}\n"), {});
  // The weight matrix decays, the bias does not.
  auto* adamw = dynamic_cast<train::DdpAdamW*>(&trainer.strategy());
  ASSERT_NE(adamw, nullptr);
  const auto& groups = adamw->optimizer().groups();
  ASSERT_EQ(groups.size(), 2u);
  ASSERT_EQ(groups[0].params.size(), 1u);
  EXPECT_EQ(groups[0].params[0].dim(), 2);
  EXPECT_DOUBLE_EQ(groups[0].weight_decay, 1e-4);
  ASSERT_EQ(groups[1].params.size(), 1u);
  EXPECT_EQ(groups[1].params[0].dim(), 1);
  EXPECT_DOUBLE_EQ(groups[1].weight_decay, 0.0);
  const auto summary = trainer.run();
  ASSERT_EQ(summary.losses.size(), 150u);
  EXPECT_LT(summary.losses.back(), 0.05 * summary.losses.front());
  EXPECT_EQ(summary.bad_steps, 0);
  EXPECT_EQ(trainer.step(), 150);
  EXPECT_EQ(task.evaluations_, 1);  // after the last step only
  EXPECT_GT(summary.samples_per_s, 0);
  EXPECT_EQ(summary.parameters, 5);
}

TEST(Trainer, NonFiniteStepIsSkippedOnEveryRank) {
  train::seed(2);
  LinearTask task(4);
  // Only the last rank's loss is NaN, at step 3; the update must be skipped everywhere.
  task.poison(3, 4, runtime().size() - 1);
  train::Trainer trainer(runtime(), task, settings("train: {steps: 6, log_every: 1}\noptim: {lr: 0.01, warmup: 0}\n"),
                         {});
  std::vector<torch::Tensor> after;  // parameters after each step
  trainer.add_step_hook([&](train::Trainer&, const train::StepEvent& e) {
    EXPECT_EQ(e.steps_done, int64_t(after.size()) + 1);
    EXPECT_EQ(e.last, e.steps_done == 6);
    after.push_back(flat(*task.model()));
  });
  const auto summary = trainer.run();
  ASSERT_EQ(after.size(), 6u);
  EXPECT_EQ(summary.bad_steps, 1);
  EXPECT_TRUE(std::isnan(summary.losses[3]));
  EXPECT_TRUE(std::isfinite(summary.losses[4]));
  EXPECT_TRUE(torch::equal(after[3], after[2]));   // the skipped step changed nothing
  EXPECT_FALSE(torch::equal(after[4], after[3]));  // the next one trained again
  EXPECT_TRUE(torch::isfinite(after[5]).all().item<bool>());
  for (const auto& p : task.model()->parameters()) EXPECT_TRUE(torch::isfinite(p.grad()).all().item<bool>());
}

// train.precision fp16: a step whose gradients overflow on one rank only is skipped on every rank by
// the loss scaler (not one of the NaN guard's bad steps), the scale halves, and after
// train.loss_scale_growth_interval good steps it doubles (closed form below); ZeRO-1/2/3 (the scaled
// gradients in the shards, unscaled in the update) skip the same steps and follow DDP to rounding.
TEST(Trainer, Fp16LossScalerSkipsAnOverflowOnEveryRank) {
  const std::string yaml =
      "train: {steps: 12, log_every: 1000, precision: fp16, loss_scale_init: 1024, loss_scale_growth_interval: 3}\n"
      "optim: {lr: 0.1, warmup: 0, clip: 0.5";
  // After each step: 3 good (x2 after the third), 2 good, overflow (x0.5), 3 good (x2), 3 good (x2).
  const std::vector<double> scales = {1024, 1024, 2048, 2048, 2048, 1024, 1024, 1024, 2048, 2048, 2048, 4096};
  torch::Tensor expected;
  for (int zero : {0, 1, 2, 3}) {
    SCOPED_TRACE("optim.zero " + std::to_string(zero));
    train::seed(4);
    LinearTask task(4);
    task.overflow(5, 6, runtime().size() - 1);  // step 5, the last rank only
    train::Trainer trainer(runtime(), task, settings(yaml + ", zero: " + std::to_string(zero) + "}"), {});
    ASSERT_NE(trainer.strategy().loss_scaler(), nullptr);
    std::vector<torch::Tensor> after;
    std::vector<double> seen;
    trainer.add_step_hook([&](train::Trainer& t, const train::StepEvent&) {
      seen.push_back(t.strategy().loss_scaler()->scale());
      after.push_back(flat(*task.model()));
    });
    const auto summary = trainer.run();
    EXPECT_EQ(summary.bad_steps, 0);
    EXPECT_EQ(summary.scale_skips, 1);
    EXPECT_EQ(seen, scales);
    ASSERT_EQ(after.size(), 12u);
    if (zero < 3) {                                    // ZeRO-3's parameters hold no data between steps
      EXPECT_TRUE(torch::equal(after[5], after[4]));   // the skipped step changed nothing
      EXPECT_FALSE(torch::equal(after[6], after[5]));  // the next one trained again
    }
    EXPECT_TRUE(std::isfinite(summary.losses[5]));  // a finite loss: the scaler's skip, not the guard's
    // Every parameter in group order (the weight, decayed; then the bias: the model's order), gathered
    // from the shards under ZeRO.
    std::vector<torch::Tensor> parts(2);
    if (auto* z = dynamic_cast<train::ZeroAdamW*>(&trainer.strategy())) {
      z->optimizer().with_each_unit(true, [&](const train::ZeroUnit& u, const std::vector<at::Tensor>& full) {
        for (size_t k = 0; k < full.size(); ++k) parts.at(u.params[k]) = full[k].reshape({-1}).cpu().clone();
      });
    } else {
      parts = {task.model()->parameters()[0].detach().reshape({-1}).cpu(),
               task.model()->parameters()[1].detach().reshape({-1}).cpu()};
    }
    const auto final = torch::cat(parts);
    if (!expected.defined()) {
      expected = final;
      continue;
    }
    EXPECT_TRUE(torch::allclose(final, expected, 1e-5, 1e-6)) << final << "\n" << expected;
  }
}

// Gradients inf/NaN at every scale (an overflow the scale cannot fix): after 64 skips in a row the
// job stops on every rank with a message that says so, instead of skipping forever.
TEST(Trainer, Fp16HopelessOverflowStopsTheJobOnEveryRank) {
  train::seed(4);
  LinearTask task(4);
  task.overflow(3, 1000, 0);  // rank 0 only, from step 4 on
  train::Trainer trainer(
      runtime(), task, settings("train: {steps: 200, log_every: 1000, precision: fp16, loss_scale_init: 1024}\n"), {});
  try {
    trainer.run();
    FAIL() << "no error";
  } catch (const train::TrainingError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("training stopped at step 67: 64 steps in a row had inf/NaN gradients", 0),
              0u)
        << e.what();
  }
}

TEST(Trainer, TooManyBadStepsInARowStopTheJobOnEveryRank) {
  train::seed(3);
  LinearTask task(4);
  task.poison(2, 1000, 0);  // rank 0 only: the others must stop too
  train::Trainer trainer(runtime(), task, settings("train: {steps: 20, max_bad_steps: 3}\n"), {});
  try {
    trainer.run();
    FAIL() << "no error";
  } catch (const train::TrainingError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(
                  "training stopped at step 4: 3 steps in a row had a non-finite loss or gradient norm "
                  "(train.max_bad_steps = 3)",
                  0),
              0u)
        << e.what();
  }
  EXPECT_EQ(trainer.step(), 4);
}

TEST(Trainer, AccumulationEqualsTheBiggerBatch) {
  auto run = [](int64_t batch, int64_t accumulate) {
    train::seed(4);
    LinearTask task(batch);
    train::Trainer trainer(runtime(), task,
                           settings("train: {steps: 5, log_every: 100, accumulate: " + std::to_string(accumulate) +
                                    "}\noptim: {lr: 0.01, warmup: 2}\n"),
                           {});
    trainer.run();
    return flat(*task.model());
  };
  const auto big = run(8, 1), accumulated = run(4, 2), other = run(8, 2);
  EXPECT_TRUE(torch::allclose(big, accumulated, 1e-5, 1e-6)) << big << accumulated;
  EXPECT_FALSE(torch::allclose(big, other, 1e-5, 1e-6));  // different data: the comparison can fail
}

// comm.grad_dtype bf16: gradients reduced in bfloat16 (then float32 again for the optimizer) follow
// the float32 run within bf16 rounding, and do differ from it (the key takes effect).
TEST(Trainer, Bf16GradientReductionFollowsFloat32) {
  auto run = [](const std::string& comm) {
    train::seed(6);
    LinearTask task(8);
    train::Trainer trainer(runtime(), task,
                           settings("train: {steps: 20, log_every: 1000}\noptim: {lr: 0.01, warmup: 2}\n" + comm), {});
    trainer.run();
    return flat(*task.model());
  };
  const auto f32 = run(""), bf16 = run("comm: {grad_dtype: bf16, bucket_mb: 0.5, first_bucket_mb: 0.25}");
  EXPECT_TRUE(torch::allclose(bf16, f32, 2e-2, 1e-3)) << bf16 << f32;
  if (runtime().size() > 1) EXPECT_FALSE(torch::equal(bf16, f32));
  // fp16 on the wire (DDP's fp16_compress_hook): 3 more bits of mantissa than bf16, closer again.
  const auto fp16 = run("comm: {grad_dtype: fp16, bucket_mb: 0.5, first_bucket_mb: 0.25}");
  EXPECT_TRUE(torch::allclose(fp16, f32, 2e-3, 1e-4)) << fp16 << f32;
  if (runtime().size() > 1) EXPECT_FALSE(torch::equal(fp16, f32));
  EXPECT_EQ(message("comm: {grad_dtype: bf16}\noptim: {zero: true}"),
            "test.yaml line 1: field 'comm.grad_dtype': bf16 gradient reduction is DistributedDataParallel's: not "
            "with optim.zero (use train.precision bf16: bfloat16 parameters, gradients reduced in bfloat16, float32 "
            "masters)");
  EXPECT_EQ(message("comm: {grad_dtype: fp8}"),
            "test.yaml line 1: field 'comm.grad_dtype': expected one of float32, bf16 or fp16, got 'fp8'");
  EXPECT_EQ(message("comm: {bucket_mb: 0}"),
            "test.yaml line 1: field 'comm.bucket_mb': expected a number > 0, got '0'");
}

TEST(Trainer, Bf16AutocastTrains) {
  train::seed(5);
  LinearTask task(8);
  train::Trainer trainer(
      runtime(), task, settings("train: {steps: 150, precision: bf16, log_every: 1000}\noptim: {lr: 0.1, warmup: 5}\n"),
      {});
  const auto summary = trainer.run();
  EXPECT_LT(summary.losses.back(), 0.1 * summary.losses.front());
  // Autocast is off again outside the trainer's forward: a float matmul stays float.
  EXPECT_EQ(torch::matmul(torch::ones({2, 2}), torch::ones({2, 2})).scalar_type(), torch::kFloat);
}

TEST(Trainer, RunFilesHoldTheConfigMetricsAndTensorboardEvents) {
  const std::string dir = shared_temp_dir("trainer_files");
  const auto config =
      meridian::Config::parse("train: {steps: 7, log_every: 3, eval_every: 4, eval_at_start: true}\n", "run.yaml");
  train::seed(6);
  LinearTask task(4);
  train::Trainer trainer(runtime(), task, train::TrainerSettings::from_config(config), {config, dir});
  const auto summary = trainer.run();
  EXPECT_EQ(task.evaluations_, 3);  // before, at step 4, after 7
  ASSERT_EQ(summary.first_eval.size(), 1u);
  ASSERT_EQ(summary.last_eval.size(), 1u);
  if (runtime().rank() == 0) {
    std::ifstream saved(dir + "/config.yaml");
    std::stringstream text;
    text << saved.rdbuf();
    EXPECT_EQ(meridian::Config::parse(text.str(), "saved").get<int>("train.eval_every"), 4);
    // metrics.csv: train rows at steps 1, 4, 7 (every 3 and the last), eval rows at 0, 4, 7.
    std::ifstream csv(dir + "/metrics.csv");
    std::string line;
    std::getline(csv, line);
    EXPECT_EQ(line, "step,wall_time,name,value");
    std::set<int64_t> loss_steps, eval_steps;
    std::map<int64_t, double> csv_loss;
    while (std::getline(csv, line)) {
      std::stringstream row(line);
      std::string step, wall, name, value;
      std::getline(row, step, ',');
      std::getline(row, wall, ',');
      std::getline(row, name, ',');
      std::getline(row, value, ',');
      if (name == "train/loss") loss_steps.insert(std::stoll(step)), csv_loss[std::stoll(step)] = std::stod(value);
      if (name == "eval/weight0") eval_steps.insert(std::stoll(step));
    }
    EXPECT_EQ(loss_steps, (std::set<int64_t>{1, 4, 7}));
    EXPECT_EQ(eval_steps, (std::set<int64_t>{0, 4, 7}));
    EXPECT_NEAR(csv_loss[7], summary.losses[6], 1e-6 * summary.losses[6]);
    // The TensorBoard file parses back with the same values (as floats).
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(dir + "/tensorboard")) files.push_back(e.path());
    ASSERT_EQ(files.size(), 1u);
    int losses = 0;
    for (const auto& e : train::read_scalar_events(files[0]))
      if (e.tag == "train/loss") {
        ++losses;
        EXPECT_FLOAT_EQ(e.value, float(summary.losses[size_t(e.step - 1)]));
      }
    EXPECT_EQ(losses, 3);
  }
  runtime().barrier();
  if (runtime().rank() == 0) std::filesystem::remove_all(dir);
}

TEST(Trainer, HealthMonitorFlagsAnInjectedStraggler) {
  if (runtime().size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::string dir = shared_temp_dir("trainer_health");
  train::seed(7);
  LinearTask task(4);
  task.slow_last_rank(50);  // 15 ms failed 1 run in 10 alone (the second report missed it): a clear margin
  const auto config = meridian::Config::parse("train: {steps: 12, health_every: 4, log_every: 100}\n", "health.yaml");
  train::Trainer trainer(runtime(), task, train::TrainerSettings::from_config(config), {config, dir});
  const auto summary = trainer.run();
  if (runtime().rank() == 0) {
    const std::string slow = "straggler: rank " + std::to_string(runtime().size() - 1) + " on ";
    int flagged = 0;
    for (const auto& w : summary.health_warnings) {
      EXPECT_EQ(w.find("straggler: rank 0 "), std::string::npos) << w;
      flagged += w.rfind(slow, 0) == 0;
    }
    EXPECT_EQ(flagged, 2) << "a straggler warning from the second report on (steps 8, 12): slow in two in a row";
    // health.jsonl: one line per report with every rank's figures.
    std::ifstream file(dir + "/health.jsonl");
    std::string line;
    int lines = 0;
    while (std::getline(file, line)) {
      ++lines;
      EXPECT_NE(line.find("\"rss_mb\""), std::string::npos);
      EXPECT_NE(line.find("\"probe_us\""), std::string::npos);
      EXPECT_EQ(line.find(slow) != std::string::npos, lines > 1) << "report " << lines;
    }
    EXPECT_EQ(lines, 3);
  } else {
    EXPECT_TRUE(summary.health_warnings.empty());
  }
  runtime().barrier();
  if (runtime().rank() == 0) std::filesystem::remove_all(dir);
}

TEST(Settings, OptimizerAndEmaErrors) {
  EXPECT_EQ(message("optim: {name: lion}"),
            "test.yaml line 1: field 'optim.name': expected one of adamw, sgd or auto, got 'lion'");
  EXPECT_EQ(message("optim: {name: sgd, zero: true}"),
            "test.yaml line 1: field 'optim.zero': ZeRO shards AdamW only: not with optim.name sgd");
  EXPECT_EQ(message("optim: {warmup_bias_lr: 0.1}"),
            "test.yaml line 1: field 'optim.warmup_bias_lr': is SGD's (Ultralytics sets it to 0 for AdamW): not with "
            "optim.name adamw");
  EXPECT_EQ(message("{optim: {zero: 3}, train: {ema: 0.99}}"),
            "test.yaml line 1: field 'train.ema': not with optim.zero 3 (the EMA keeps a full copy of the weights, "
            "which ZeRO-3 shards)");
  EXPECT_EQ(message("optim: {zero: 4}"),
            "test.yaml line 1: field 'optim.zero': expected one of 0, 1, 2, 3, false or true, got '4'");
  EXPECT_EQ(message("optim: {name: sgd, momentum: 1}"),
            "test.yaml line 1: field 'optim.momentum': expected a number in [0, 1), got '1'");
  EXPECT_EQ(
      message("optim: {name: sgd, momentum: 0}"),
      "test.yaml line 1: field 'optim.momentum': must be > 0 with optim.nesterov true (or set optim.nesterov: false)");
  EXPECT_EQ(message("optim: {name: sgd, momentum: 0, nesterov: false}"), "no error");
  EXPECT_EQ(message("optim: {name: sgd, warmup_momentum: -0.1}"),
            "test.yaml line 1: field 'optim.warmup_momentum': expected a number in [0, 1), got '-0.1'");
  EXPECT_EQ(message("train: {ema: 1.5}"),
            "test.yaml line 1: field 'train.ema': expected a number in [0, 1), got '1.5'");
  EXPECT_EQ(message("train: {ema: 0.99, ema_tau: 0}"),
            "test.yaml line 1: field 'train.ema_tau': expected a number > 0, got '0'");
  const auto defaults = settings("optim: {name: sgd}");
  EXPECT_EQ(defaults.optimizer, train::Optimizer::SGD);
  EXPECT_DOUBLE_EQ(defaults.momentum, 0.937);
  EXPECT_TRUE(defaults.nesterov);
  EXPECT_DOUBLE_EQ(defaults.warmup_momentum, 0.8);
  EXPECT_EQ(settings("").optimizer, train::Optimizer::AdamW);
  EXPECT_EQ(settings("").ema, 0.0);
  EXPECT_EQ(settings("").ema_tau, 2000.0);
}

TEST(Schedule, MomentumRampsDuringWarmupThenStays) {
  const auto s = settings("optim: {name: sgd, momentum: 0.9, warmup_momentum: 0.5, warmup: 4}\ntrain: {steps: 20}\n");
  for (int64_t step = 0; step <= 4; ++step)
    EXPECT_NEAR(train::momentum_at(s, step), 0.5 + 0.4 * double(step) / 4, 1e-15) << "step " << step;
  EXPECT_DOUBLE_EQ(train::momentum_at(s, 0), 0.5);
  EXPECT_DOUBLE_EQ(train::momentum_at(s, 4), 0.9);
  EXPECT_DOUBLE_EQ(train::momentum_at(s, 19), 0.9);
  const auto no_warmup = settings("optim: {name: sgd, momentum: 0.7, warmup: 0}");
  EXPECT_DOUBLE_EQ(train::momentum_at(no_warmup, 0), 0.7);
}

// SGD (Nesterov, momentum warmup) trains the toy task; the trainer sets momentum_at(step) before each step.
TEST(Trainer, SgdLossFallsWithMomentumWarmup) {
  train::seed(11);
  LinearTask task(8);
  const auto s = settings(
      "train: {steps: 150, log_every: 1000}\noptim: {name: sgd, lr: 0.05, warmup: 6, momentum: 0.9, "
      "warmup_momentum: 0.6, weight_decay: 5e-4}\n");
  train::Trainer trainer(runtime(), task, s, {});
  auto* strategy = dynamic_cast<train::DdpSgd*>(&trainer.strategy());
  ASSERT_NE(strategy, nullptr);
  EXPECT_EQ(trainer.strategy().optimizer_kind(), "sgd");
  EXPECT_EQ(trainer.ema(), nullptr);
  auto& sgd = strategy->optimizer();
  ASSERT_EQ(sgd.groups().size(), 2u);
  EXPECT_DOUBLE_EQ(sgd.groups()[0].weight_decay, 5e-4);
  EXPECT_TRUE(sgd.options().nesterov);
  std::vector<double> momenta, lrs;
  trainer.add_step_hook([&](train::Trainer&, const train::StepEvent&) {
    momenta.push_back(sgd.momentum());
    lrs.push_back(sgd.lr());
  });
  const auto summary = trainer.run();
  ASSERT_EQ(momenta.size(), 150u);
  for (int64_t step = 0; step < 150; ++step) {
    EXPECT_DOUBLE_EQ(momenta[size_t(step)], train::momentum_at(s, step)) << "step " << step;
    EXPECT_DOUBLE_EQ(lrs[size_t(step)], train::learning_rate(s, step)) << "step " << step;
  }
  EXPECT_DOUBLE_EQ(momenta[0], 0.6);
  EXPECT_DOUBLE_EQ(momenta[6], 0.9);
  EXPECT_LT(summary.losses.back(), 0.05 * summary.losses.front());
  EXPECT_EQ(summary.bad_steps, 0);
  EXPECT_TRUE(sgd.state()[0].momentum_buffer.defined());
  EXPECT_EQ(sgd.state()[0].step, 150);
}

// The EMA equals a reference recomputed from the parameters after every step (the skipped NaN step
// not counted), evaluations see the EMA weights, and the training weights come back bit for bit.
TEST(Trainer, EmaFollowsTheReferenceAndEvaluationsUseIt) {
  for (const double tau : {2.0, 1e9}) {
    train::seed(12);
    LinearTask task(4);
    task.record_weights_ = true;
    task.poison(5, 6, runtime().size() - 1);  // step 5 skipped on every rank: no EMA update
    const double decay = 0.9;
    const int64_t steps = 12;
    train::Trainer trainer(runtime(), task,
                           settings("train: {steps: 12, log_every: 1000, eval_every: 4, ema: 0.9, ema_tau: " +
                                    std::to_string(tau) + "}\noptim: {lr: 0.05, warmup: 2}\n"),
                           {});
    ASSERT_NE(trainer.ema(), nullptr);
    EXPECT_DOUBLE_EQ(trainer.ema()->decay_at(3), decay * (1 - std::exp(-3 / tau)));
    ASSERT_EQ(trainer.ema()->names(), (std::vector<std::string>{"weight", "bias"}));
    // The reference starts at the model's (broadcast) weights.
    std::vector<torch::Tensor> reference;
    for (const auto& p : task.model()->parameters()) reference.push_back(p.detach().clone());
    EXPECT_TRUE(torch::equal(trainer.ema()->tensors()[0], reference[0]));
    int64_t updates = 0;
    std::vector<torch::Tensor> after_step;  // flat parameters after each step (before any evaluation)
    std::map<int64_t, double> ema_weight0;  // the reference EMA's weight0 after each step
    trainer.add_step_hook([&](train::Trainer& t, const train::StepEvent& e) {
      after_step.push_back(flat(*task.model()));
      if (t.state().bad_in_a_row == 0) {  // applied: one update with the next decay
        const double d = decay * (1 - std::exp(-double(++updates) / tau));
        const auto params = task.model()->parameters();
        for (size_t i = 0; i < reference.size(); ++i) reference[i].mul_(d).add_(params[i].detach(), 1 - d);
      }
      ema_weight0[e.steps_done] = reference[0][0][0].item<double>();
      EXPECT_EQ(t.ema()->updates(), updates) << "step " << e.steps_done;
      for (size_t i = 0; i < reference.size(); ++i)
        EXPECT_TRUE(torch::equal(t.ema()->tensors()[i], reference[i]))
            << "tensor " << i << " step " << e.steps_done << " tau " << tau;
    });
    const auto summary = trainer.run();
    EXPECT_EQ(summary.bad_steps, 1);
    EXPECT_EQ(updates, steps - 1);
    EXPECT_EQ(trainer.ema()->updates(), steps - 1);
    // Evaluations at steps 4, 8 and after 12 saw the EMA's weight0, not the model's.
    ASSERT_EQ(task.evaluated_.size(), 3u);
    EXPECT_EQ(task.evaluated_[0], ema_weight0[4]);
    EXPECT_EQ(task.evaluated_[1], ema_weight0[8]);
    EXPECT_EQ(task.evaluated_[2], ema_weight0[12]);
    EXPECT_EQ(summary.last_eval.at(0).second, ema_weight0[12]);
    if (tau == 2.0)
      EXPECT_NE(task.evaluated_[2], after_step.back()[0].item<double>());  // the comparison can fail
    else
      EXPECT_TRUE(
          torch::allclose(trainer.ema()->tensors()[0].reshape({-1}), after_step.back().narrow(0, 0, 4), 1e-6, 1e-7));
    // Training weights after each evaluation exactly as before it: the next step started from them,
    // and the final evaluation left them too.
    ASSERT_EQ(task.weights_at_next_batch_.size(), size_t(steps));
    for (int64_t k = 1; k < steps; ++k)
      EXPECT_TRUE(torch::equal(task.weights_at_next_batch_[size_t(k)], after_step[size_t(k - 1)])) << "step " << k;
    EXPECT_TRUE(torch::equal(flat(*task.model()), after_step.back()));
  }
}

// An observer attached from outside (observer.h): it is called at every fixed point in order, and its
// requests steer the loop: an evaluation after step 2, a save at step 3, and a stop after step 4 that
// rank 0 decides and every rank agrees on (a collective in on_step_end).
class Watcher : public train::Observer {
 public:
  explicit Watcher(std::vector<std::string>& calls, std::string name) : calls_(calls), name_(std::move(name)) {}
  void on_run_begin(int64_t step, train::LoopControl&) override { note("run_begin " + std::to_string(step)); }
  void on_step_begin(int64_t step) override { note("step_begin " + std::to_string(step)); }
  void on_batch(int64_t micro) override { note("batch " + std::to_string(micro)); }
  void on_step_end(const train::StepEvent& e, const train::StepResult& r, train::LoopControl& c) override {
    note("step_end " + std::to_string(e.steps_done) + (e.last ? " last" : ""));
    EXPECT_TRUE(std::isfinite(r.loss));
    EXPECT_GT(r.times.total, 0);
    if (name_ != "a") return;
    c.evaluate = e.steps_done == 2;
    c.save = e.steps_done == 3;
    if (runtime().max(int64_t(runtime().rank() == 0 && e.steps_done == 4)) > 0)
      c.request_stop("the watcher had enough");
  }
  void on_evaluate(const train::StepEvent& e, const train::Metrics& m, train::LoopControl&) override {
    note("evaluate " + std::to_string(e.steps_done) + " " + m.at(0).first);
  }
  void on_save(const train::StepEvent& e) override {
    note("save " + std::to_string(e.steps_done) + (e.last ? " last" : "") + (e.evaluated ? " evaluated" : "") +
         (e.save ? " asked" : ""));
  }
  void on_log(train::Metrics& m) override { m.emplace_back("watcher_" + name_, 1.0); }
  void on_run_end(train::TrainSummary& s) override { note("run_end " + s.early_stop); }

 private:
  void note(const std::string& what) { calls_.push_back(name_ + ": " + what); }
  std::vector<std::string>& calls_;
  std::string name_;
};

TEST(Trainer, ObserversSeeTheFixedPointsInOrderAndSteerTheLoop) {
  train::seed(13);
  LinearTask task(2);
  train::Trainer trainer(runtime(), task,
                         settings("train: {steps: 10, accumulate: 2, log_every: 1000}\noptim: {lr: 0.01}\n"), {});
  std::vector<std::string> calls;
  trainer.add_observer(std::make_unique<Watcher>(calls, "a"));
  trainer.add_observer(std::make_unique<Watcher>(calls, "b"));
  const auto summary = trainer.run();
  EXPECT_EQ(trainer.step(), 4);
  EXPECT_EQ(summary.losses.size(), 4u);
  EXPECT_EQ(summary.early_stop, "the watcher had enough");
  EXPECT_FALSE(summary.stopped);
  EXPECT_EQ(task.evaluations_, 2);  // asked for after step 2, and the end of the run after step 4
  std::vector<std::string> expected;
  const auto both = [&](const std::string& what) {
    expected.push_back("a: " + what);
    expected.push_back("b: " + what);
  };
  both("run_begin 0");
  for (int step = 1; step <= 4; ++step) {
    both("step_begin " + std::to_string(step - 1));
    both("batch 0");
    both("batch 1");
    both("step_end " + std::to_string(step));
    if (step == 2 || step == 4) both("evaluate " + std::to_string(step) + " weight0");
    both("save " + std::to_string(step) + (step == 4 ? " last" : "") + (step == 2 || step == 4 ? " evaluated" : "") +
         (step == 3 ? " asked" : ""));
  }
  both("run_end the watcher had enough");
  EXPECT_EQ(calls, expected);
}
