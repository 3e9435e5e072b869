#include "meridian/train/siglip_trainer.h"

#include <spdlog/spdlog.h>
#include <torch/nn/functional/upsampling.h>
#include <torch/optim/adamw.h>

#include <chrono>
#include <cmath>

#include "meridian/comm/communicator.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/data/loader.h"
#include "meridian/models/siglip.h"
#include "meridian/parallel/ddp.h"

namespace meridian::train {

TrainSettings TrainSettings::from_config(const Config& c) {
  TrainSettings s;
  s.batch = c.get<int64_t>("train.batch", s.batch);
  s.steps = c.get<int64_t>("train.steps", s.steps);
  s.lr = c.get<double>("train.lr", s.lr);
  s.min_lr = c.get<double>("train.min_lr", s.min_lr);
  s.weight_decay = c.get<double>("train.weight_decay", s.weight_decay);
  s.clip = c.get<double>("train.clip", s.clip);
  s.warmup = c.get<int64_t>("train.warmup", s.warmup);
  s.log_every = c.get<int64_t>("train.log_every", s.log_every);
  s.seed = uint64_t(c.get<int64_t>("train.seed", 0));
  s.augment = c.get<bool>("train.augment", s.augment);
  if (s.batch < 1) throw ConfigError(c.origin(), "train.batch", "must be at least 1");
  if (s.steps < 1) throw ConfigError(c.origin(), "train.steps", "must be at least 1");
  if (!(s.lr > 0) || s.min_lr < 0 || s.min_lr > s.lr) throw ConfigError(c.origin(), "train.lr", "need lr > 0 and 0 <= min_lr <= lr");
  if (s.warmup < 0) throw ConfigError(c.origin(), "train.warmup", "must be >= 0");
  if (s.log_every < 1) throw ConfigError(c.origin(), "train.log_every", "must be at least 1");
  return s;
}

namespace {
double learning_rate(const TrainSettings& s, int64_t step) {
  if (step < s.warmup) return s.lr * double(step + 1) / double(s.warmup);
  const double progress = double(step - s.warmup) / double(std::max<int64_t>(1, s.steps - s.warmup));
  return s.min_lr + 0.5 * (s.lr - s.min_lr) * (1 + std::cos(M_PI * std::min(1.0, progress)));
}

// uint8 [B, S, S, 3] -> float [B, 3, size, size] in [-1, 1].
at::Tensor image_input(const at::Tensor& images, int64_t size) {
  auto x = images.permute({0, 3, 1, 2}).to(at::kFloat).div_(127.5).sub_(1.0);
  if (x.size(2) == size && x.size(3) == size) return x.contiguous();
  namespace F = torch::nn::functional;
  return F::interpolate(x, F::InterpolateFuncOptions().size(std::vector<int64_t>{size, size}).mode(torch::kBilinear).align_corners(false));
}
}  // namespace

TrainReport train_siglip(const comm::Runtime& rt, const TrainOptions& o) {
  const TrainSettings s = TrainSettings::from_config(o.config);
  models::SiglipConfig mc = models::SiglipConfig::from_config(o.config);

  data::LoaderOptions lo;
  lo.path = o.data;
  lo.batch_size = s.batch;
  lo.seed = s.seed;
  lo.augment = s.augment;
  data::Loader loader(rt, lo);
  const auto& info = loader.info();
  if (info.vocab_size > mc.vocab_size) {
    spdlog::info("model.vocab_size {} raised to the dataset tokenizer's {}", mc.vocab_size, info.vocab_size);
    mc.vocab_size = info.vocab_size;
  }
  mc.pad_id = info.pad_id;

  at::manual_seed(s.seed);
  models::Siglip model(mc);
  auto ddp_comm = comm::make_communicator(rt, comm::Backend::MPI);
  auto loss_comm = comm::make_communicator(rt, comm::Backend::MPI);  // collectives inside backward: their own
  parallel::DistributedDataParallel ddp(rt, *ddp_comm, model.ptr());
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(s.lr).weight_decay(s.weight_decay));

  TrainReport report;
  report.parameters = models::parameter_count(*model);
  report.flops_per_sample = mc.flops_per_sample();
  if (rt.rank() == 0)
    spdlog::info("siglip: {:.2f}M parameters, {:.2f} GFLOP per sample (forward), {} ranks x batch {}, {} steps",
                 report.parameters / 1e6, report.flops_per_sample / 1e9, rt.size(), s.batch, s.steps);
  const int64_t context = std::min<int64_t>(mc.context_length, info.context_length);
  auto timer = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < s.steps; ++step) {
    if (step == 1) timer = std::chrono::steady_clock::now();  // the first step warms up
    const data::Batch batch = loader.next();
    for (auto& group : optimizer.param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(learning_rate(s, step));
    optimizer.zero_grad();
    const auto images = model->encode_images(image_input(batch.images, mc.image_size));
    const auto lengths = batch.lengths.clamp_max(context).to(at::kLong);
    const auto texts = model->encode_text(batch.tokens.narrow(1, 0, context).to(at::kLong), lengths);
    const auto loss = models::siglip_loss(images, texts, model->logit_scale(), model->logit_bias(), loss_comm.get());
    loss.backward();
    ddp.finish();
    parallel::clip_grad_norm(model->parameters(), s.clip);
    optimizer.step();
    auto mean = loss.detach().reshape({1}).clone();
    ddp_comm->allreduce(mean, comm::ReduceOp::Avg);
    report.losses.push_back(mean.item<double>());
    if (rt.rank() == 0 && (step % s.log_every == 0 || step + 1 == s.steps))
      spdlog::info("step {:>6}  loss {:.4f}  lr {:.2e}  t {:.2f}  b {:.2f}", step, report.losses.back(),
                   learning_rate(s, step), model->logit_scale().exp().item<double>(), model->logit_bias().item<double>());
  }
  if (s.steps > 1) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - timer).count();
    report.samples_per_s = double((s.steps - 1) * s.batch * rt.size()) / seconds;
  }
  return report;
}

}  // namespace meridian::train
