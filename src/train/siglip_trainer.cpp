#include "meridian/train/siglip_trainer.h"

#include <spdlog/spdlog.h>
#include <torch/nn/functional/upsampling.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "meridian/comm/communicator.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/data/dataset_reader.h"
#include "meridian/data/loader.h"
#include "meridian/data/tokenizer.h"
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
  s.eval_data = c.get<std::string>("train.eval_data", "");
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
// Every rank embeds a contiguous share of the rows; the embeddings are gathered (padded to equal
// shares) so every rank computes the same metrics.
EvalResult evaluate(const comm::Runtime& rt, comm::Communicator& comm, models::Siglip& model, const std::string& path,
                    int64_t context) {
  at::NoGradGuard no_grad;
  model->eval();
  data::DatasetReader reader(path, data::IoDriver::POSIX);
  const auto& info = reader.info();
  const int64_t n = info.count, K = info.captions_per_sample, L = info.context_length, E = model->config().embed;
  const int64_t share = (n + rt.size() - 1) / rt.size(), first = std::min(n, rt.rank() * share),
                last = std::min(n, first + share);
  at::Tensor img = at::zeros({share, E}), txt = at::zeros({share * K, E}), labels = at::full({share}, -1, at::kInt);
  const int64_t chunk = 64;
  for (int64_t a = first; a < last; a += chunk) {
    const int64_t m = std::min(chunk, last - a);
    std::vector<int64_t> rows(m);
    for (int64_t i = 0; i < m; ++i) rows[i] = a + i;
    auto images = at::empty({m, info.height, info.width, 3}, at::kByte);
    auto tokens = at::empty({m, K, L}, at::kInt);
    auto lengths = at::empty({m, K}, at::kInt);
    auto lab = at::empty({m}, at::kInt);
    reader.read_rows(rows, images.data_ptr<uint8_t>(), tokens.data_ptr<int32_t>(), lengths.data_ptr<int32_t>(),
                     lab.data_ptr<int32_t>());
    img.narrow(0, a - first, m).copy_(model->encode_images(image_input(images, model->config().image_size)));
    txt.narrow(0, (a - first) * K, m * K)
        .copy_(model->encode_text(tokens.reshape({m * K, L}).narrow(1, 0, context).to(at::kLong),
                                  lengths.reshape({m * K}).clamp_max(context).to(at::kLong)));
    labels.narrow(0, a - first, m).copy_(lab);
  }
  auto all_img = at::empty({share * rt.size(), E}), all_txt = at::empty({share * K * rt.size(), E});
  auto all_labels = at::empty({share * rt.size()}, at::kInt);
  comm.allgather(img, all_img);
  comm.allgather(txt, all_txt);
  comm.allgather(labels, all_labels);
  // Drop the padding rows (each rank's share beyond n).
  std::vector<int64_t> keep;
  for (int r = 0; r < rt.size(); ++r)
    for (int64_t i = 0; i < share && r * share + i < n; ++i) keep.push_back(r * share + i);
  const auto idx = at::tensor(keep, at::kLong);
  std::vector<int64_t> keep_txt;
  for (int64_t i : keep)
    for (int64_t k = 0; k < K; ++k) keep_txt.push_back(i * K + k);
  all_img = all_img.index_select(0, idx);
  all_txt = all_txt.index_select(0, at::tensor(keep_txt, at::kLong));
  all_labels = all_labels.index_select(0, idx);

  EvalResult r;
  r.images = n;
  r.captions = n * K;
  const auto sim = at::matmul(all_img, all_txt.t());  // [n, n K]
  const auto owner = at::arange(n * K, at::kLong).div(K, "floor");
  const int ks[3] = {1, 5, 10};
  for (int q = 0; q < 3; ++q) {
    const int64_t k = std::min<int64_t>(ks[q], n * K);
    const auto top = std::get<1>(sim.topk(k, 1));                           // [n, k] caption indices
    const auto hit = (owner.index_select(0, top.reshape({-1})).view({n, k}) ==
                      at::arange(n, at::kLong).unsqueeze(1)).any(1);
    r.image_to_text[q] = 100.0 * hit.to(at::kDouble).mean().item<double>();
    const int64_t k2 = std::min<int64_t>(ks[q], n);
    const auto top2 = std::get<1>(sim.t().topk(k2, 1));                       // [n K, k2] image indices
    r.text_to_image[q] = 100.0 * (top2 == owner.unsqueeze(1)).any(1).to(at::kDouble).mean().item<double>();
  }
  if (!info.class_names.empty()) {
    const auto tok = reader.tokenizer();
    auto tokens = at::empty({int64_t(info.class_names.size()), context}, at::kInt);
    auto lengths = at::empty({int64_t(info.class_names.size())}, at::kLong);
    for (size_t c = 0; c < info.class_names.size(); ++c) {
      std::string name = info.class_names[c];
      std::replace(name.begin(), name.end(), '_', ' ');
      lengths[c] = tok.encode("a satellite photo of a " + name + ".", int(context), tokens[c].data_ptr<int32_t>());
    }
    const auto classes = model->encode_text(tokens.to(at::kLong), lengths);
    const auto predicted = std::get<1>(at::matmul(all_img, classes.t()).max(1)).to(at::kInt);
    const auto labelled = all_labels >= 0;
    if (labelled.any().item<bool>())
      r.zero_shot_top1 = 100.0 * (predicted == all_labels).masked_select(labelled).to(at::kDouble).mean().item<double>();
  }
  model->train();
  return r;
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
  if (!s.eval_data.empty()) {
    report.eval = evaluate(rt, *ddp_comm, model, s.eval_data, context);
    report.evaluated = true;
    const auto& e = report.eval;
    if (rt.rank() == 0)
      spdlog::info("eval {}: {} images, {} captions; image->text R@1/5/10 {:.1f}/{:.1f}/{:.1f}; text->image "
                   "{:.1f}/{:.1f}/{:.1f}; zero-shot top-1 {:.1f}%",
                   s.eval_data, e.images, e.captions, e.image_to_text[0], e.image_to_text[1], e.image_to_text[2],
                   e.text_to_image[0], e.text_to_image[1], e.text_to_image[2], e.zero_shot_top1);
  }
  return report;
}

}  // namespace meridian::train
