#include <spdlog/spdlog.h>
#include <torch/nn/functional/normalization.h>
#include <torch/nn/functional/upsampling.h>

#include <algorithm>

#include "meridian/ckpt/checkpoint.h"
#include "meridian/ckpt/file.h"
#include "meridian/comm/communicator.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/config_binding.h"
#include "meridian/core/error.h"
#include "meridian/data/dataset_reader.h"
#include "meridian/data/format.h"
#include "meridian/data/loader.h"
#include "meridian/data/tokenizer.h"
#include "meridian/tasks/registry.h"
#include "meridian/tasks/siglip_hf.h"
#include "meridian/tasks/siglip_task.h"
#include "meridian/train/batch_copier.h"
#include "meridian/train/settings.h"

namespace meridian::tasks {

namespace {
// Host -> device: through pinned memory, without waiting (the copy overlaps the CPU's next work).
at::Tensor to_device(const at::Tensor& t, const c10::Device& device) {
  if (device.is_cpu()) return t;
  return t.pin_memory().to(device, /*non_blocking=*/true);
}

// Captions as SigLIP reads them: [N, context] with the pad id after the text, the eos last when a
// caption is cut (tokens [N, L] as stored, lengths [N] with the eos counted).
at::Tensor fit_captions(const at::Tensor& tokens, const at::Tensor& lengths, int64_t context, int64_t pad_id,
                        int64_t eos_id) {
  const int64_t n = tokens.size(0), l = tokens.size(1);
  auto out = at::full({n, context}, pad_id, at::kLong);
  const int64_t keep = std::min(l, context);
  out.narrow(1, 0, keep).copy_(tokens.narrow(1, 0, keep));
  if (l > context) {
    const auto cut = lengths.to(at::kLong) > context;
    out.select(1, context - 1).masked_fill_(cut, eos_id);
  }
  return out;
}

at::Tensor normalized(const at::Tensor& x) {
  return torch::nn::functional::normalize(x, torch::nn::functional::NormalizeFuncOptions().dim(-1));
}
}  // namespace

at::Tensor image_input(const at::Tensor& images, int64_t size) {
  auto x = images.permute({0, 3, 1, 2}).to(at::kFloat).div_(127.5).sub_(1.0);
  if (x.size(2) == size && x.size(3) == size) return x.contiguous();
  namespace F = torch::nn::functional;
  return F::interpolate(
      x,
      F::InterpolateFuncOptions().size(std::vector<int64_t>{size, size}).mode(torch::kBilinear).align_corners(false));
}

std::vector<std::string> default_prompts() {
  return {"a satellite photo of a {}.", "an aerial image of {}.", "an aerial photograph of a {} area.",
          "a remote sensing image of {}."};
}

train::Metrics SiglipEval::metrics() const {
  // mR: the mean of the six recalls, as remote-sensing retrieval papers (RSICD, RSITMD) report it.
  const double mean_recall = (image_to_text[0] + image_to_text[1] + image_to_text[2] + text_to_image[0] +
                              text_to_image[1] + text_to_image[2]) /
                             6;
  train::Metrics m{{"i2t_r1", image_to_text[0]}, {"i2t_r5", image_to_text[1]}, {"i2t_r10", image_to_text[2]},
                   {"t2i_r1", text_to_image[0]}, {"t2i_r5", text_to_image[1]}, {"t2i_r10", text_to_image[2]}};
  if (zero_shot_top1 >= 0) m.emplace_back("zero_shot", zero_shot_top1);
  m.emplace_back("mR", mean_recall);
  return m;
}

at::Tensor class_embeddings(models::Siglip& model, const data::Tokenizer& tok, const std::vector<std::string>& names,
                            const std::vector<std::string>& prompts, c10::Device device) {
  at::NoGradGuard no_grad;
  const int64_t context = model->config().context_length, E = model->config().embed;
  const int64_t C = int64_t(names.size()), P = int64_t(prompts.size());
  auto tokens = at::empty({C * P, context}, at::kInt);
  for (int64_t c = 0; c < C; ++c) {
    const std::string name = data::class_words(names[size_t(c)]);
    for (int64_t p = 0; p < P; ++p) {
      std::string text = prompts[size_t(p)];
      const auto at = text.find("{}");
      if (at != std::string::npos) text.replace(at, 2, name);
      tok.encode(text, int(context), tokens[c * P + p].data_ptr<int32_t>());
    }
  }
  const auto per_prompt = model->encode_text(to_device(tokens.to(at::kLong), device)).to(at::kFloat);
  return normalized(per_prompt.view({C, P, E}).mean(1));
}

SiglipEval evaluate_siglip(const comm::Runtime& rt, comm::Communicator& comm, models::Siglip& model,
                           const std::string& path, const std::vector<std::string>& prompts) {
  at::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  const auto device = rt.device();
  data::DatasetReader reader(path, data::IoDriver::POSIX);
  const auto& info = reader.info();
  if (info.kind != "image_text") throw DataError(path, "kind", "evaluation needs an image_text dataset");
  const int64_t context = model->config().context_length;
  const int64_t n = info.count, K = info.captions_per_sample, L = info.context_length, E = model->config().embed;
  const int64_t share = (n + rt.size() - 1) / rt.size(), first = std::min(n, rt.rank() * share),
                last = std::min(n, first + share);
  const auto f32 = at::TensorOptions().device(device).dtype(at::kFloat);
  at::Tensor img = at::zeros({share, E}, f32), txt = at::zeros({share * K, E}, f32);
  at::Tensor labels = at::full({share}, -1, f32.dtype(at::kInt));
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
    img.narrow(0, a - first, m)
        .copy_(model->encode_images(image_input(to_device(images, device), model->config().image_size)));
    txt.narrow(0, (a - first) * K, m * K)
        .copy_(model->encode_text(to_device(
            fit_captions(tokens.reshape({m * K, L}), lengths.reshape({m * K}), context, info.pad_id, info.eos_id),
            device)));
    labels.narrow(0, a - first, m).copy_(lab);
  }
  auto all_img = at::empty({share * rt.size(), E}, f32), all_txt = at::empty({share * K * rt.size(), E}, f32);
  auto all_labels = at::empty({share * rt.size()}, f32.dtype(at::kInt));
  comm.allgather(img, all_img);
  comm.allgather(txt, all_txt);
  comm.allgather(labels, all_labels);
  // Drop the padding rows (each rank's share beyond n).
  std::vector<int64_t> keep, keep_txt;
  for (int r = 0; r < rt.size(); ++r)
    for (int64_t i = 0; i < share && r * share + i < n; ++i) keep.push_back(r * share + i);
  for (int64_t i : keep)
    for (int64_t k = 0; k < K; ++k) keep_txt.push_back(i * K + k);
  const auto idx = at::tensor(keep, at::kLong).to(device);
  all_img = all_img.index_select(0, idx);
  all_txt = all_txt.index_select(0, at::tensor(keep_txt, at::kLong).to(device));
  all_labels = all_labels.index_select(0, idx);

  SiglipEval r;
  r.images = n;
  r.captions = n * K;
  const auto sim = at::matmul(all_img, all_txt.t());  // [n, n K]
  const auto owner = at::arange(n * K, f32.dtype(at::kLong)).div(K, "floor");
  const auto image_ids = at::arange(n, f32.dtype(at::kLong));
  const int ks[3] = {1, 5, 10};
  for (int q = 0; q < 3; ++q) {
    const int64_t k = std::min<int64_t>(ks[q], n * K);
    const auto top = std::get<1>(sim.topk(k, 1));  // [n, k] caption indices
    const auto hit = (owner.index_select(0, top.reshape({-1})).view({n, k}) == image_ids.unsqueeze(1)).any(1);
    r.image_to_text[q] = 100.0 * hit.to(at::kDouble).mean().item<double>();
    const int64_t k2 = std::min<int64_t>(ks[q], n);
    const auto top2 = std::get<1>(sim.t().topk(k2, 1));  // [n K, k2] image indices
    r.text_to_image[q] = 100.0 * (top2 == owner.unsqueeze(1)).any(1).to(at::kDouble).mean().item<double>();
  }
  const auto labelled = all_labels >= 0;
  if (!info.class_names.empty() && !prompts.empty() && labelled.any().item<bool>()) {
    const auto classes = class_embeddings(model, reader.tokenizer(), info.class_names, prompts, device);
    const auto predicted = std::get<1>(at::matmul(all_img, classes.t()).max(1)).to(at::kInt);
    r.zero_shot_top1 = 100.0 * (predicted == all_labels).masked_select(labelled).to(at::kDouble).mean().item<double>();
  }
  if (was_training) model->train();
  return r;
}

namespace {
const ConfigBinding<SiglipSettings>& siglip_bindings() {
  using S = SiglipSettings;
  static const auto table = [] {
    ConfigBinding<S> b;
    b.integer("train.batch", &S::batch, "image-caption pairs per rank per micro-step").at_least(1);
    b.choice("task.loss", &S::softmax, {{"sigmoid", false}, {"softmax", true}},
             "sigmoid: SigLIP's pairwise loss; softmax: CLIP's");
    b.strings("task.prompts", &S::prompts, "zero-shot prompt templates ({} is the class name)");
    b.string("task.init", &S::init,
             "weights to start from: a Hugging Face SiglipModel directory (config.json sets the model: keys; "
             "model.safetensors or shards with their index) or one .safetensors file; '': random");
    b.boolean("data.augment", &S::augment, "random resized crop and flip of the training images");
    b.integer("data.workers", &S::workers,
              "threads per rank that decode (JPEG datasets) and augment each batch; 0: 1 on a CPU rank, 4 on a "
              "GPU rank")
        .at_least(0)
        .at_most(256);
    return b;
  }();
  return table;
}
}  // namespace

void SiglipSettings::declare(ConfigSchema& schema) { siglip_bindings().declare(schema); }
SiglipSettings SiglipSettings::from_config(const Config& config) { return siglip_bindings().read(config); }

struct SiglipTask::Impl {
  const comm::Runtime& rt;
  models::SiglipConfig mc;
  SiglipSettings settings;
  std::string eval_data;
  int64_t context = 0;
  std::unique_ptr<data::Loader> loader;
  std::vector<int64_t> shares;                    // every rank's samples per batch (train.balance); empty: even
  std::unique_ptr<comm::Communicator> loss_comm;  // the gathers inside forward/backward: their own
  models::Siglip model{nullptr};
  at::Tensor images, tokens;  // the current batch, on the device
  train::BatchCopier copier;  // host batches to the device (GPU: pinned, on a side stream)
  at::Tensor scale, bias;     // the last forward's temperature (log) and bias, for step_metrics

  train::DataPosition position;  // after the last batch handed out
  at::Tensor rows;               // the last batch's dataset rows (host)

  Impl(const comm::Runtime& runtime, const Config& c, const train::TrainerSettings& trainer,
       const std::string& train_data, train::DataPosition start)
      : rt(runtime),
        mc(models::SiglipConfig::from_config(c)),
        settings(SiglipSettings::from_config(c)),
        eval_data(DataSettings::from_config(c).eval),
        copier(runtime.device()),
        position(start) {
    if (train_data.empty()) throw ConfigError(c.origin(), "data.train", "missing: give --data or data.train");

    data::LoaderOptions lo;
    lo.pinned = rt.device().is_cuda();
    lo.path = train_data;
    lo.batch_size = settings.batch;
    lo.seed = uint64_t(trainer.seed);
    lo.augment = settings.augment;
    lo.workers = data::loader_workers(settings.workers, rt.device().is_cuda());
    lo.epoch = start.epoch;
    lo.position = start.position;
    loader = std::make_unique<data::Loader>(rt, lo);
    const auto& info = loader->info();
    if (info.kind != "image_text")
      throw DataError(train_data, "kind", "the siglip task trains on an image_text dataset");
    // Where the config and the dataset disagree, say what the run does.
    if (rt.rank() == 0) {
      if (info.vocab_size > mc.vocab_size)
        spdlog::warn("model.vocab_size {} is below the dataset tokenizer's {} ({}): the model gets {}", mc.vocab_size,
                     info.vocab_size, train_data, info.vocab_size);
      if (info.height != mc.image_size || info.width != mc.image_size)
        spdlog::warn(
            "model.image_size {} differs from the dataset's {}x{} px images ({}): they are resized to {} px on the "
            "device",
            mc.image_size, info.width, info.height, train_data, mc.image_size);
      if (mc.context_length < info.context_length)
        spdlog::warn(
            "model.context_length {} is below the dataset's {} tokens per caption ({}): longer captions are cut, "
            "their eos kept last",
            mc.context_length, info.context_length, train_data);
    }
    const std::string& init = settings.init;
    if (!init.empty() && info.vocab_size > mc.vocab_size)
      throw DataError(train_data, "tokenizer",
                      std::to_string(info.vocab_size) + " pieces, more than model.vocab_size " +
                          std::to_string(mc.vocab_size) + " of task.init " + init +
                          ": make the dataset with the checkpoint's tokenizer (prep --tokenizer " + init + ")");
    mc.vocab_size = std::max(mc.vocab_size, info.vocab_size);
    mc.pad_id = info.pad_id;
    mc.eos_id = info.eos_id;
    context = mc.context_length;
    model = models::Siglip(mc);
    if (!init.empty()) load_hf_weights(*model, init, rt.rank() == 0);
    model->to(rt.device());
    if (settings.softmax) model->logit_bias().set_requires_grad(false);  // CLIP's loss has no bias term
    loss_comm = comm::make_communicator(rt, comm::default_backend(rt));
  }
};

void SiglipTask::declare(ConfigSchema& schema) {
  models::SiglipConfig::declare(schema);
  SiglipSettings::declare(schema);
}

CheckpointEval SiglipTask::evaluate(const comm::Runtime& rt, const ModelSource& source, const std::string& data_path) {
  const data::DatasetInfo info = data::validate_dataset(data_path);
  auto mc = siglip_config(source);
  if (info.vocab_size > mc.vocab_size)
    throw DataError(data_path, "tokenizer",
                    std::to_string(info.vocab_size) + " pieces, more than the model's vocabulary of " +
                        std::to_string(mc.vocab_size) + " (" + source.path +
                        "): make the dataset with the model's tokenizer (prep --tokenizer)");
  mc.pad_id = info.pad_id;
  mc.eos_id = info.eos_id;
  models::Siglip model = siglip_model(source, mc, rt.rank() == 0);
  model->to(rt.device());
  auto comm = comm::make_communicator(rt, comm::default_backend(rt));
  const auto result = evaluate_siglip(rt, *comm, model, data_path, SiglipSettings::from_config(source.config).prompts);
  return {std::to_string(result.images) + " images, " + std::to_string(result.captions) + " captions", "",
          result.metrics()};
}

SiglipTask::SiglipTask(const comm::Runtime& rt, const Config& config, const train::TrainerSettings& trainer,
                       const std::string& train_data, train::DataPosition start)
    : impl_(std::make_unique<Impl>(rt, config, trainer, train_data, start)) {}
SiglipTask::~SiglipTask() = default;

std::string SiglipTask::name() const { return impl_->settings.softmax ? "clip" : "siglip"; }
std::shared_ptr<torch::nn::Module> SiglipTask::model() { return impl_->model.ptr(); }
nn::BlockRunner* SiglipTask::blocks() { return &impl_->model->blocks(); }
int64_t SiglipTask::batch_size() const { return impl_->settings.batch; }
double SiglipTask::flops_per_sample() const { return impl_->mc.flops_per_sample(); }
models::Siglip& SiglipTask::siglip() { return impl_->model; }

at::Tensor SiglipTask::batch_rows() const { return impl_->rows; }

void SiglipTask::next_batch() {
  auto& m = *impl_;
  const data::Batch b = m.loader->next();
  m.position = {b.epoch, b.next_position};
  m.rows = b.rows;
  // Every caption padded to the context length, as SigLIP reads them (the pooled last position).
  const auto on_device =
      m.copier.to_device({b.images, fit_captions(b.tokens, b.lengths, m.context, m.mc.pad_id, m.mc.eos_id)});
  m.images = image_input(on_device[0], m.mc.image_size);
  m.tokens = on_device[1];
}

at::Tensor SiglipTask::forward() {
  auto& m = *impl_;
  // The loss in float32 also under autocast (logits of a few thousand pairs, exp of the scale): the
  // embeddings cast here, the loss computed with autocast off (models::siglip_loss).
  const auto images = m.model->encode_images(m.images).to(at::kFloat);
  const auto texts = m.model->encode_text(m.tokens).to(at::kFloat);
  // Copies: under ZeRO-3 the parameters hold no data after the step.
  m.scale = m.model->logit_scale().detach().clone();
  m.bias = m.model->logit_bias().detach().clone();
  if (m.settings.softmax) return models::clip_loss(images, texts, m.model->logit_scale(), m.loss_comm.get(), m.shares);
  return models::siglip_loss(images, texts, m.model->logit_scale(), m.model->logit_bias(), m.loss_comm.get(), m.shares);
}

void SiglipTask::set_shares(const std::vector<int64_t>& shares) {
  auto& m = *impl_;
  m.loader->set_shares(shares, m.position.epoch, m.position.position);
  m.shares = shares;
}

bool SiglipTask::decays(const std::string& name, const at::Tensor& p) const {
  // Matrices and kernels decay; biases, norms, temperature and bias do not. Position embeddings
  // are matrices by shape but, as in CLIP/SigLIP recipes, are not decayed either.
  return p.dim() >= 2 && name.find("_pos") == std::string::npos;
}

train::Metrics SiglipTask::evaluate() {
  if (impl_->eval_data.empty()) return {};
  return evaluate_siglip(impl_->rt, *impl_->loss_comm, impl_->model, impl_->eval_data, impl_->settings.prompts)
      .metrics();
}

train::DataPosition SiglipTask::data_position() const { return impl_->position; }
int64_t SiglipTask::batches_per_epoch() const { return impl_->loader->sampler().steps_per_epoch(); }

train::Metrics SiglipTask::step_metrics() {
  if (!impl_->scale.defined()) return {};
  return {{"temperature", impl_->scale.exp().item<double>()}, {"bias", impl_->bias.item<double>()}};
}

}  // namespace meridian::tasks
