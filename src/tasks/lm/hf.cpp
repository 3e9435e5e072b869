#include <c10/util/accumulate.h>
#include <spdlog/spdlog.h>

#include <filesystem>

#include "meridian/ckpt/checkpoint.h"
#include "meridian/ckpt/file.h"
#include "meridian/core/config.h"
#include "meridian/core/error.h"
#include "meridian/core/files.h"
#include "meridian/core/json_file.h"
#include "meridian/data/format.h"
#include "meridian/data/tokenizer.h"
#include "meridian/models/hf_checkpoint.h"
#include "meridian/models/llama_hf.h"
#include "meridian/models/lora.h"
#include "meridian/tasks/lm_hf.h"
#include "meridian/tasks/lm_task.h"
#include "meridian/tasks/registry.h"

namespace meridian::tasks {

namespace fs = std::filesystem;

HfLlamaWeights::HfLlamaWeights(models::LlamaImpl& model, const std::string& path)
    : path_(path), checkpoint_(models::open_hf_checkpoint(path)) {
  const bool tied = model.config().tie_embeddings;
  for (const auto& t : checkpoint_.tensors)
    bytes_ += int64_t(at::elementSize(t.dtype)) * c10::multiply_integers(t.shape);
  matched_ = models::match_tensors(
      model, checkpoint_.tensors,
      [&](const std::string& name) {
        if (models::llama_skipped_tensor(name)) return ++buffers_, std::string();
        if (tied && name == "lm_head.weight") return ++head_, std::string();
        return name;
      },
      checkpoint_.weights);
}

void HfLlamaWeights::read(const std::string& name, const at::Tensor& value) const {
  at::NoGradGuard no_grad;
  value.copy_(matched_.at(name)->read());
}

void HfLlamaWeights::report(size_t count, const std::string& how) const {
  if (buffers_ > 0)
    spdlog::info("{}: skipped {} rotary_emb.inv_freq buffer(s) (recomputed from model.rope_theta)", path_, buffers_);
  if (head_ > 0) spdlog::info("{}: skipped lm_head.weight (model.tie_embeddings: the head is the embedding)", path_);
  spdlog::info("{}: {} tensors ({:.1f} MB) loaded from {}, {}", path_, count, double(bytes_) / 1e6, checkpoint_.weights,
               how);
}

void load_hf_llama(models::LlamaImpl& model, const std::string& path, at::ScalarType dtype, c10::Device device,
                   bool report) {
  const HfLlamaWeights weights(model, path);
  const auto fill = [&](const std::string& name, at::Tensor& t) {
    at::Tensor value = at::empty(t.sizes(), at::TensorOptions().dtype(dtype).device(device));
    weights.read(name, value);
    t.set_data(value);
  };
  for (auto& p : model.named_parameters(/*recurse=*/true)) fill(p.key(), p.value());
  for (auto& b : model.named_buffers(/*recurse=*/true)) fill(b.key(), b.value());
  if (report) weights.report(weights.size(), std::string("one at a time, in ") + c10::toString(dtype));
}

namespace {

// A token's text for tokenizer_config.json; null when the tokenizer has none.
nlohmann::json piece_or_null(const data::Tokenizer& tok, int id) {
  return id >= 0 ? nlohmann::json(tok.piece(id)) : nlohmann::json(nullptr);
}

}  // namespace

HfExport export_hf_llama(const std::string& checkpoint, const std::string& out, const std::string& dtype,
                         int64_t max_shard_bytes, const std::string& tokenizer) {
  HfExportDir dir(out, dtype);  // checks dtype and out first; removed again on any failure below
  Config config;
  auto model = load_lm(checkpoint, &config);
  // The tokenizer: a Hugging Face directory (given, or the run's task.init), else the training data's.
  std::string source = tokenizer;
  const std::string init = LmSettings::from_config(config).init, data = DataSettings::from_config(config).train;
  if (source.empty() && !init.empty() && fs::exists(fs::path(init) / "tokenizer.model")) source = init;
  if (source.empty() && !data.empty() && fs::exists(data)) source = data;
  if (source.empty())
    throw UserError(checkpoint + ": the tokenizer it was trained with is not here (task.init '" + init +
                    "', data.train '" + data + "'): give --tokenizer (a Hugging Face directory or the dataset)");
  const data::Tokenizer tok =
      fs::is_directory(source) ? data::Tokenizer::from_hf_dir(source) : data::dataset_tokenizer(source);
  if (tok.vocab_size() > model->config().vocab_size)
    throw UserError(source + ": its tokenizer has " + std::to_string(tok.vocab_size()) +
                    " pieces, more than the model's vocabulary " + std::to_string(model->config().vocab_size) +
                    " (not the tokenizer this run trained with)");

  dir.write_weights(models::merged_weights(*model), max_shard_bytes);
  const int bos = tok.bos_id(), eos = tok.eos_id();
  if (fs::is_directory(source)) {
    for (const char* f : {"tokenizer.model", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json"})
      dir.copy_if_there(source, f);
  } else {
    write_file_atomically(dir.file("tokenizer.model"), tok.model_bytes());
    const nlohmann::json special{{"bos_token", piece_or_null(tok, bos)},
                                 {"eos_token", piece_or_null(tok, eos)},
                                 {"unk_token", tok.piece(tok.piece_id("<unk>") >= 0 ? tok.piece_id("<unk>") : 0)}};
    nlohmann::json tc = special;
    tc["tokenizer_class"] = "LlamaTokenizer";
    tc["model_max_length"] = model->config().max_seq_len;
    tc["add_bos_token"] = tok.adds_bos();
    tc["add_eos_token"] = false;
    // The "▁" before a text after a special token, as prep text tokenised it (TextRules::prefix; a
    // prep-trained tokenizer's: SentencePiece's own, before every text, the nearest being legacy).
    tc["legacy"] = tok.rules().prefix != data::TextRules::Prefix::kFirst;
    if (tok.rules().prefix == data::TextRules::Prefix::kNever) tc["add_prefix_space"] = false;
    tc["pad_token"] = nullptr;
    dir.write_json("tokenizer_config.json", tc);
    dir.write_json("special_tokens_map.json", special);
  }
  // generation_config.json: the tokenizer directory's (the published model's), else bos and eos.
  if (!fs::is_directory(source) || !dir.copy_if_there(source, "generation_config.json")) {
    nlohmann::json g{{"_from_model_config", true}};
    if (bos >= 0) g["bos_token_id"] = bos;
    if (eos >= 0) g["eos_token_id"] = eos;
    dir.write_json("generation_config.json", g);
  }
  dir.write_json("config.json", models::llama_hf_config(model->config(), dir.torch_dtype(), bos, eos));
  return dir.commit(source);
}

}  // namespace meridian::tasks
