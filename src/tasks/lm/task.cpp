#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "meridian/ckpt/checkpoint.h"
#include "meridian/ckpt/file.h"
#include "meridian/comm/communicator.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/config_binding.h"
#include "meridian/core/error.h"
#include "meridian/data/text_loader.h"
#include "meridian/models/hf_checkpoint.h"
#include "meridian/models/llama_hf.h"
#include "meridian/models/safetensors.h"
#include "meridian/tasks/lm_hf.h"
#include "meridian/tasks/lm_task.h"
#include "meridian/tasks/registry.h"
#include "meridian/train/batch_copier.h"
#include "meridian/train/settings.h"
#include "meridian/train/strategy.h"
#include "meridian/train/strategy_plan.h"

namespace meridian::tasks {

namespace {
const ConfigBinding<LmSettings>& lm_bindings() {
  using S = LmSettings;
  static const auto table = [] {
    ConfigBinding<S> b;
    b.integer("train.batch", &S::batch, "sequences per rank per micro-step").at_least(1);
    b.integer("data.seq_len", &S::seq_len, "tokens per training sequence").at_least(1).defaults_to("model.max_seq_len");
    b.choice("data.mode", &S::mode, {{"pack", data::TextLoaderOptions::Pack}, {"pad", data::TextLoaderOptions::Pad}},
             "pack: windows of the token stream; pad: one document per sequence");
    b.string("task.init", &S::init,
             "weights to start from: a Hugging Face LlamaForCausalLM directory (config.json sets the model: keys; "
             "model.safetensors or shards with their index; F32, BF16 or F16) or one .safetensors file with its "
             "names; '': random");
    return b;
  }();
  return table;
}

// Sum of token losses (ignored targets excluded), on the device, nothing read back.
at::Tensor token_loss_sum(models::Llama& model, const at::Tensor& tokens, const at::Tensor& targets) {
  const auto logits = model->forward(tokens).to(at::kFloat);
  return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}), {}, at::Reduction::Sum,
                                data::kIgnoreIndex);
}

// Tokens with a target, counted in the loader's host batch (no device read).
int64_t counted_targets(const at::Tensor& host_targets) {
  return (host_targets != data::kIgnoreIndex).sum().item<int64_t>();
}
}  // namespace

void LmSettings::declare(ConfigSchema& schema) { lm_bindings().declare(schema); }
LmSettings LmSettings::from_config(const Config& config) { return lm_bindings().read(config); }

struct LmTask::Impl {
  const comm::Runtime& rt;
  models::LlamaConfig mc;
  LmSettings settings;
  std::string eval_data;
  int64_t seq_len = 0, last_tokens = 0;
  at::Tensor last_loss;  // the last forward's, on the device: read only when logged
  std::unique_ptr<data::TextLoader> loader;
  models::Llama model{nullptr};
  std::unique_ptr<comm::Communicator> eval_comm;  // created by the first evaluation (collective)
  at::Tensor tokens, targets;
  train::DataPosition position;
  at::Tensor rows;                                 // the last batch's dataset rows (host)
  std::unique_ptr<comm::Communicator> count_comm;  // forward's sum of the ranks' target tokens (CPU, MPI)
  train::BatchCopier copier;                       // host batches to the device (GPU: pinned, on a side stream)
  bool shape_only = false;                         // built without values: the strategy's shards get them
  std::unique_ptr<HfLlamaWeights> deferred;        // task.init for assign_weights(); null once read, or resuming

  Impl(const comm::Runtime& runtime, const Config& c, const train::TrainerSettings& trainer,
       const std::string& train_data, train::DataPosition start)
      : rt(runtime),
        mc(models::LlamaConfig::from_config(c)),
        settings(LmSettings::from_config(c)),
        eval_data(DataSettings::from_config(c).eval),
        position(start),
        count_comm(comm::make_communicator(runtime, comm::Backend::MPI)),
        copier(runtime.device()) {
    seq_len = settings.seq_len > 0 ? settings.seq_len : mc.max_seq_len;
    if (seq_len > mc.max_seq_len)
      throw ConfigError(c.source("data.seq_len"), "data.seq_len",
                        "must be within [1, model.max_seq_len = " + std::to_string(mc.max_seq_len) + "]");
    if (train_data.empty()) throw ConfigError(c.origin(), "data.train", "missing: give --data or data.train");
    data::TextLoaderOptions o;
    o.pinned = runtime.device().is_cuda();
    o.path = train_data;
    o.seq_len = seq_len;
    o.batch_size = settings.batch;
    o.seed = uint64_t(trainer.seed);
    o.mode = settings.mode;
    o.epoch = start.epoch;
    o.position = start.position;
    loader = std::make_unique<data::TextLoader>(rt, o);
    if (loader->info().vocab_size > mc.vocab_size) {
      if (!settings.init.empty() && std::filesystem::is_directory(settings.init))  // its config.json's vocabulary
        throw DataError(train_data, "tokenizer",
                        std::to_string(loader->info().vocab_size) + " pieces, more than model.vocab_size " +
                            std::to_string(mc.vocab_size) + " of task.init " + settings.init +
                            ": make the dataset with the checkpoint's tokenizer (prep text --tokenizer DIR)");
      if (rt.rank() == 0)
        spdlog::warn("model.vocab_size {} is below the dataset tokenizer's {} ({}): the model gets {}", mc.vocab_size,
                     loader->info().vocab_size, train_data, loader->info().vocab_size);
      mc.vocab_size = loader->info().vocab_size;
    }
    // Resuming: the checkpoint's weights replace these, so the published ones are not read again.
    const bool resuming = start.epoch > 0 || start.position > 0;
    const auto lora = models::LoraConfig::from_config(c);
    // ZeRO-3 from a published checkpoint or resuming: the model is built for its shapes only and
    // each rank reads its shards unit by unit (of task.init in assign_weights, of the checkpoint in
    // the strategy's load), so no rank ever holds the whole model. LoRA's frozen base is replicated,
    // so it is built.
    const train::StrategyPlan plan = train::plan_strategy(trainer);
    if (plan.takes_shape_only_model && !lora.enabled() && (resuming || !settings.init.empty())) {
      model = models::Llama(mc, /*values=*/false);
      shape_only = true;
      if (!resuming) deferred = std::make_unique<HfLlamaWeights>(*model, settings.init);  // checked now, read later
      return;  // the shape-only parameters stay on the CPU: the shards go to the device
    }
    if (!settings.init.empty() && !resuming) {
      // Built shape-only, each tensor read in the dtype it trains in: LoRA's frozen base in bfloat16
      // with ZeRO and train.precision bf16 (the strategy plan's parameter_dtype), else float32.
      const auto frozen = lora.enabled() ? plan.parameter_dtype : at::kFloat;
      model = models::Llama(mc, /*values=*/false);
      load_hf_llama(*model, settings.init, frozen, rt.device(), rt.rank() == 0);
    } else {
      model = models::Llama(mc);
    }
    // LoRA: adapters on the targets (after the base weights are in), everything else frozen.
    if (lora.enabled()) {
      const int64_t layers = models::apply_lora(*model, lora);
      int64_t trainable = 0, all = 0;
      for (const auto& p : model->parameters()) all += p.numel(), trainable += p.requires_grad() ? p.numel() : 0;
      if (rt.rank() == 0)
        spdlog::info("LoRA: rank {}, alpha {}, dropout {} on {} layers ({}): {} of {} parameters trained", lora.rank,
                     lora.alpha, lora.dropout, layers, fmt::join(lora.targets, ", "), trainable, all);
    }
    model->to(rt.device());
  }
};

models::Llama load_lm(const std::string& checkpoint, Config* saved) {
  ckpt::Reader reader(checkpoint);
  const Config config = ckpt::saved_config(reader);
  require_task(config, "lm", checkpoint);
  if (saved) *saved = config;
  auto mc = models::LlamaConfig::from_config(config);
  mc.vocab_size = reader.shape("model/model.embed_tokens.weight").at(0);  // raised to the tokenizer's in training
  models::Llama model(mc);
  const auto lora = models::LoraConfig::from_config(config);
  if (lora.enabled()) models::apply_lora(*model, lora);
  ckpt::load_module(checkpoint, *model);
  return model;
}

int64_t export_merged(const std::string& checkpoint, const std::string& out) {
  auto model = load_lm(checkpoint);
  const auto merged = models::merged_weights(*model);
  models::save_safetensors(out, merged, {{"format", "pt"}, {"source", checkpoint}});
  return int64_t(merged.size());
}

void LmTask::declare(ConfigSchema& schema) {
  models::LlamaConfig::declare(schema);
  LmSettings::declare(schema);
  models::LoraConfig::declare(schema);
}

LmTask::LmTask(const comm::Runtime& rt, const Config& config, const train::TrainerSettings& trainer,
               const std::string& train_data, train::DataPosition start)
    : impl_(std::make_unique<Impl>(rt, config, trainer, train_data, start)) {}
LmTask::~LmTask() = default;

std::shared_ptr<torch::nn::Module> LmTask::model() { return impl_->model.ptr(); }
bool LmTask::defers_weights() const { return impl_->shape_only; }

void LmTask::assign_weights(train::Strategy& strategy) {
  auto& m = *impl_;
  if (!m.deferred) return;
  size_t count = 0;
  strategy.assign([&](const std::string& name, const at::Tensor& value) { m.deferred->read(name, value), ++count; });
  if (count != m.deferred->size())  // every tensor the file provides is a trained parameter (no LoRA here)
    throw std::logic_error("lm: " + std::to_string(count) + " of " + std::to_string(m.deferred->size()) +
                           " task.init tensors assigned");
  if (m.rt.rank() == 0) m.deferred->report(count, "each rank keeping its ZeRO-3 shards, one unit at a time");
  m.deferred.reset();
}
nn::BlockRunner* LmTask::blocks() { return &impl_->model->blocks(); }
int64_t LmTask::batch_size() const { return impl_->settings.batch; }
double LmTask::flops_per_sample() const { return impl_->mc.flops_per_token(impl_->seq_len) * double(impl_->seq_len); }
double LmTask::tokens_per_sample() const { return double(impl_->seq_len); }
train::DataPosition LmTask::data_position() const { return impl_->position; }
int64_t LmTask::batches_per_epoch() const { return impl_->loader->sampler().steps_per_epoch(); }

void LmTask::set_shares(const std::vector<int64_t>& shares) {
  auto& m = *impl_;
  m.loader->set_shares(shares, m.position.epoch, m.position.position);
}

at::Tensor LmTask::batch_rows() const { return impl_->rows; }

void LmTask::next_batch() {
  auto& m = *impl_;
  const data::TextBatch b = m.loader->next();
  m.position = {b.epoch, b.next_position};
  m.rows = b.rows;
  m.last_tokens = counted_targets(b.targets);
  const auto on_device = m.copier.to_device({b.tokens, b.targets});
  m.tokens = on_device[0];
  m.targets = on_device[1];
}

at::Tensor LmTask::forward() {
  auto& m = *impl_;
  const at::Tensor sum = token_loss_sum(m.model, m.tokens, m.targets);
  // Divided by the mean over ranks of the ranks' target tokens: the ranks' losses then average to the
  // mean over every target token of the global batch, whatever each rank's share of it. The counts
  // come from the host batches and are summed over MPI: nothing waits for the device.
  at::Tensor tokens = at::full({1}, double(m.last_tokens), at::kDouble);
  m.count_comm->allreduce(tokens, comm::ReduceOp::Sum);
  const auto loss = sum / std::max(tokens.item<double>() / double(m.rt.size()), 1.0);
  m.last_loss = loss.detach();
  return loss;
}

bool LmTask::decays(const std::string& name, const at::Tensor& p) const {
  return p.dim() >= 2 && name.find("embed_tokens") == std::string::npos;  // not embeddings, norms
}

train::Metrics LmEval::metrics() const {
  return {{"eval_loss", loss}, {"eval_perplexity", std::exp(loss)}, {"eval_tokens", double(tokens)}};
}

LmEval evaluate_lm(const comm::Runtime& rt, comm::Communicator& comm, models::Llama& model, const std::string& path,
                   int64_t seq_len) {
  // One pass over the set: every rank its share of the pack windows (batch 1, so at most ranks - 1
  // windows of the tail are left out), the sums of all ranks added.
  data::TextLoaderOptions o;
  o.path = path;
  o.seq_len = seq_len;
  o.batch_size = 1;
  o.mode = data::TextLoaderOptions::Pack;
  data::TextLoader eval(rt, o);
  if (eval.info().vocab_size > model->config().vocab_size)
    throw DataError(path, "tokenizer",
                    std::to_string(eval.info().vocab_size) + " pieces, more than the model's vocabulary " +
                        std::to_string(model->config().vocab_size) + ": make it with the model's tokenizer");
  const int64_t per_rank = eval.sampler().steps_per_epoch();
  const bool was_training = model->is_training();
  model->eval();
  at::NoGradGuard no_grad;
  double sum = 0;
  int64_t count = 0;
  for (int64_t i = 0; i < per_rank; ++i) {
    const auto b = eval.next();
    sum += token_loss_sum(model, b.tokens.to(rt.device()), b.targets.to(rt.device())).item<double>();
    count += counted_targets(b.targets);
  }
  if (was_training) model->train();
  auto totals = at::tensor({sum, double(count)}, at::kDouble);
  comm.allreduce(totals, comm::ReduceOp::Sum);
  LmEval r;
  r.windows = per_rank * rt.size();
  r.tokens = int64_t(totals[1].item<double>());
  r.loss = totals[0].item<double>() / std::max(1.0, totals[1].item<double>());
  return r;
}

train::Metrics LmTask::evaluate() {
  auto& m = *impl_;
  if (m.eval_data.empty()) return {};
  if (!m.eval_comm) m.eval_comm = comm::make_communicator(m.rt, comm::Backend::MPI);
  return evaluate_lm(m.rt, *m.eval_comm, m.model, m.eval_data, m.seq_len).metrics();
}

namespace {
CheckpointEval lm_checkpoint_eval(const comm::Runtime& rt, models::Llama& model, int64_t seq_len,
                                  const std::string& data_path) {
  model->to(rt.device());
  auto comm = comm::make_communicator(rt, comm::Backend::MPI);
  const LmEval r = evaluate_lm(rt, *comm, model, data_path, seq_len);
  return {std::to_string(r.windows) + " windows of " + std::to_string(seq_len) + " tokens, " +
              std::to_string(r.tokens) + " tokens with loss",
          "", r.metrics()};
}
}  // namespace

models::Llama lm_model(const ModelSource& source, c10::Device device, bool report) {
  require_model_task(source, "lm", "lm");
  if (!source.published) {
    auto model = load_lm(source.path);
    model->to(device);
    return model;
  }
  models::Llama model(models::LlamaConfig::from_config(source.config), /*values=*/false);
  load_hf_llama(*model, source.path, at::kFloat, device, report);
  return model;
}

CheckpointEval LmTask::evaluate(const comm::Runtime& rt, const ModelSource& source, const std::string& data_path) {
  auto model = lm_model(source, rt.device(), rt.rank() == 0);
  const int64_t seq_len = LmSettings::from_config(source.config).seq_len;
  return lm_checkpoint_eval(rt, model, seq_len > 0 ? seq_len : model->config().max_seq_len, data_path);
}

train::Metrics LmTask::step_metrics() {
  const double loss = impl_->last_loss.defined() ? impl_->last_loss.item<double>() : 0.0;
  return {{"tokens_with_loss", double(impl_->last_tokens)}, {"perplexity", std::exp(loss)}};
}

}  // namespace meridian::tasks
