#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "meridian/ckpt/checkpoint.h"
#include "meridian/ckpt/file.h"
#include "meridian/comm/communicator.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/config.h"
#include "meridian/core/error.h"
#include "meridian/core/files.h"
#include "meridian/core/json_file.h"
#include "meridian/data/embeddings.h"
#include "meridian/data/format.h"
#include "meridian/data/image_input.h"
#include "meridian/models/hf_checkpoint.h"
#include "meridian/models/safetensors.h"
#include "meridian/tasks/registry.h"
#include "meridian/tasks/siglip_hf.h"
#include "meridian/tasks/siglip_task.h"

namespace meridian::tasks {

namespace fs = std::filesystem;

namespace {

// The tokenizer of a Hugging Face directory (spiece.model and its rules) or of a dataset.
data::Tokenizer tokenizer_from(const std::string& path) {
  return fs::is_directory(path) ? data::Tokenizer::from_hf_dir(path) : data::dataset_tokenizer(path);
}

// Where a siglip run's tokenizer is: task.init's directory when it has spiece.model, else data.train
// when that file is here; "" when neither.
std::string training_tokenizer(const Config& config) {
  const std::string init = SiglipSettings::from_config(config).init, data = DataSettings::from_config(config).train;
  if (!init.empty() && fs::exists(fs::path(init) / "spiece.model")) return init;
  if (!data.empty() && fs::exists(data)) return data;
  return "";
}

// `text` as one CSV field: quoted (quotes doubled) when it holds a comma, quote or line break.
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string q = "\"";
  for (char c : text) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

// Rank `rank`'s contiguous share of n rows: [first, last), and the share size every rank pads to.
struct Share {
  int64_t first, last, size;
};
Share share_of(const comm::Runtime& rt, int64_t n) {
  const int64_t size = (n + rt.size() - 1) / rt.size();
  const int64_t first = std::min(n, int64_t(rt.rank()) * size);
  return {first, std::min(n, first + size), size};
}

// Every rank's share of rows ([size, ...] each, padded) gathered in rank order, padding dropped.
at::Tensor gather_rows(const comm::Runtime& rt, comm::Communicator& comm, const at::Tensor& mine, int64_t n) {
  auto sizes = mine.sizes().vec();
  sizes[0] *= rt.size();
  auto all = at::empty(sizes, mine.options());
  comm.allgather(mine.contiguous(), all);
  return all.narrow(0, 0, n).cpu();
}

// Every rank's share of `names` encoded `batch` at a time (`encode` returns the embeddings of a part
// and sets `used` to the token ids it read, texts only), gathered in order on every rank:
// [names, embed] and, with `columns` > 0, the ids [names, columns].
template <typename Encode>
std::pair<at::Tensor, at::Tensor> encode_all(const comm::Runtime& rt, LoadedSiglip& m,
                                             const std::vector<std::string>& names, int64_t columns, int64_t batch,
                                             Encode encode) {
  at::NoGradGuard no_grad;
  m.model->eval();
  m.model->to(rt.device());
  const int64_t n = int64_t(names.size()), embed = m.model->config().embed;
  const Share s = share_of(rt, n);
  const auto on = at::TensorOptions().device(rt.device());
  auto embeddings = at::zeros({s.size, embed}, on.dtype(at::kFloat));
  auto inputs = columns > 0 ? at::zeros({s.size, columns}, on.dtype(at::kInt)) : at::Tensor();
  for (int64_t a = s.first; a < s.last; a += batch) {
    const int64_t count = std::min(batch, s.last - a);
    const std::vector<std::string> part(names.begin() + a, names.begin() + a + count);
    at::Tensor used;
    embeddings.narrow(0, a - s.first, count).copy_(encode(part, used));
    if (inputs.defined()) inputs.narrow(0, a - s.first, count).copy_(used);
  }
  auto comm = comm::make_communicator(rt, comm::default_backend(rt));
  auto all = gather_rows(rt, *comm, embeddings, n);
  return {all, inputs.defined() ? gather_rows(rt, *comm, inputs, n) : at::Tensor()};
}

template <typename Encode>
int64_t embed_rows(const comm::Runtime& rt, LoadedSiglip& m, const std::vector<std::string>& names, int64_t columns,
                   const std::string& out, const std::string& kind, int64_t batch, Encode encode) {
  const auto [all, all_inputs] = encode_all(rt, m, names, columns, batch, encode);
  if (rt.rank() == 0) data::write_embeddings(out, all, names, all_inputs, m.origin, kind);
  rt.barrier();  // the file is complete when any rank returns
  return int64_t(names.size());
}

// The images of `dir` named `names` embedded (encode_all), after checking the model's preprocessing
// has its size.
at::Tensor image_embeddings(const comm::Runtime& rt, LoadedSiglip& m, const std::string& dir,
                            const std::vector<std::string>& names, int64_t batch) {
  const auto& p = m.images;
  if (p.height != m.model->config().image_size || p.width != m.model->config().image_size)
    throw DataError(m.origin, "preprocessor size",
                    std::to_string(p.height) + "x" + std::to_string(p.width) + " px, not the model's image_size " +
                        std::to_string(m.model->config().image_size));
  const auto device = rt.device();
  return encode_all(rt, m, names, 0, batch,
                    [&](const std::vector<std::string>& part, at::Tensor&) {
                      return m.model->encode_images(data::model_pixels(dir, part, p).to(device));
                    })
      .first;
}

}  // namespace

void load_hf_weights(models::SiglipImpl& model, const std::string& path, bool report) {
  const auto checkpoint = models::open_hf_checkpoint(path);
  std::vector<std::string> skipped;
  models::load_into(
      model, checkpoint.tensors,
      [&](const std::string& name) {
        if (!models::siglip_skipped_tensor(name)) return name;
        skipped.push_back(name);
        return std::string();
      },
      checkpoint.weights);
  if (!report) return;
  for (const auto& name : skipped) spdlog::info("{}: {} skipped (a buffer transformers recomputes)", path, name);
  spdlog::info("{}: {} tensors loaded from {}", path, checkpoint.tensors.size() - skipped.size(), checkpoint.weights);
}

models::SiglipConfig siglip_config(const ModelSource& source) {
  require_model_task(source, "siglip", "siglip");
  auto mc = models::SiglipConfig::from_config(source.config);
  if (!source.published)
    mc.vocab_size = ckpt::Reader(source.path).shape("model/text_model.embeddings.token_embedding.weight").at(0);
  return mc;
}

models::Siglip siglip_model(const ModelSource& source, const models::SiglipConfig& config, bool report) {
  models::Siglip model(config);
  if (source.published)
    load_hf_weights(*model, source.path, report);
  else
    ckpt::load_module(source.path, *model);
  return model;
}

LoadedSiglip load_siglip(const ModelSource& source, const std::string& tokenizer) {
  LoadedSiglip m;
  const std::string& path = source.path;
  m.origin = path;
  models::SiglipConfig mc = siglip_config(source);
  std::string tokenizer_path = tokenizer;
  m.images.height = m.images.width = int(mc.image_size);
  if (source.published) {
    if (tokenizer_path.empty() && fs::exists(fs::path(path) / "spiece.model")) tokenizer_path = path;
    const fs::path pre = fs::path(path) / "preprocessor_config.json";
    if (fs::exists(pre)) m.images = data::ImageProcessing::from_hf_file(pre.string());
  } else if (tokenizer_path.empty()) {
    tokenizer_path = training_tokenizer(source.config);
  }
  if (!tokenizer_path.empty()) {
    m.tokenizer = tokenizer_from(tokenizer_path);
    mc.pad_id = m.tokenizer->pad_id();
    mc.eos_id = m.tokenizer->eos_id();
    if (m.tokenizer->vocab_size() > mc.vocab_size)
      throw DataError(tokenizer_path, "tokenizer",
                      std::to_string(m.tokenizer->vocab_size()) + " pieces, more than the model's vocabulary of " +
                          std::to_string(mc.vocab_size) + " (" + path + ")");
  }
  m.model = siglip_model(source, mc, false);
  return m;
}

int64_t embed_images(const comm::Runtime& rt, LoadedSiglip& m, const std::string& dir, const std::string& out,
                     int64_t batch) {
  const auto names = data::list_images(dir);
  if (names.empty()) throw UserError(dir + ": no image files (.jpg, .jpeg, .png, .tif, .tiff, .bmp, .ppm)");
  const auto all = image_embeddings(rt, m, dir, names, batch);
  if (rt.rank() == 0) data::write_embeddings(out, all, names, at::Tensor(), m.origin, "images");
  rt.barrier();  // the file is complete when any rank returns
  return int64_t(names.size());
}

PredictSummary predict_siglip(const comm::Runtime& rt, const ModelSource& source, const PredictOptions& o) {
  if (o.classes.empty()) throw UserError("predict: give --classes (a file with one class per line, or \"a,b,c\")");
  for (size_t i = 0; i < o.classes.size(); ++i)
    if (o.classes[i].find_first_not_of(" \t") == std::string::npos)
      throw UserError("predict: --classes: class " + std::to_string(i + 1) + " of " + std::to_string(o.classes.size()) +
                      " is an empty name");
  if (o.top_k < 1) throw UserError("predict: --top-k must be at least 1");
  const data::ImageInputs in = data::image_inputs(o.images, "predict");
  LoadedSiglip m = load_siglip(source, o.tokenizer);
  if (!m.tokenizer)
    throw UserError(source.path +
                    ": no tokenizer for the class prompts (give --tokenizer: a Hugging Face directory with "
                    "spiece.model, or the dataset the model was trained on)");
  const SiglipSettings settings = SiglipSettings::from_config(source.config);
  const auto images = image_embeddings(rt, m, in.dir, in.names, o.batch);
  const int64_t k = std::min<int64_t>(o.top_k, int64_t(o.classes.size()));
  if (rt.rank() == 0) {
    at::NoGradGuard no_grad;
    const auto classes = class_embeddings(m.model, *m.tokenizer, o.classes, settings.prompts, rt.device()).cpu();
    const auto logits = at::matmul(images, classes.t()) * m.model->logit_scale().detach().exp().cpu().to(at::kFloat) +
                        (settings.softmax ? 0.0 : m.model->logit_bias().detach().cpu().item<double>());
    const auto probs = (settings.softmax ? logits.softmax(1) : logits.sigmoid()).to(at::kDouble);
    const auto [best, index] = probs.topk(k, 1);
    std::string csv = "image,rank,class,probability\n";
    for (size_t i = 0; i < in.names.size(); ++i)
      for (int64_t r = 0; r < k; ++r) {
        const std::string& name = o.classes[size_t(index[int64_t(i)][r].item<int64_t>())];
        csv += csv_field(in.names[i]) + "," + std::to_string(r + 1) + "," + csv_field(name) + "," +
               fmt::format("{:.6f}", best[int64_t(i)][r].item<double>()) + "\n";
      }
    write_file_atomically(o.out, csv);
  }
  rt.barrier();  // the file is complete when any rank returns
  return {int64_t(in.names.size()), 0,
          fmt::format("the top {} of {} classes each ({}; {} prompts per class)", k, o.classes.size(),
                      settings.softmax ? "softmax over the classes" : "sigmoid per class", settings.prompts.size())};
}

int64_t embed_texts(const comm::Runtime& rt, LoadedSiglip& m, const std::string& texts, const std::string& out,
                    int64_t batch) {
  if (!m.tokenizer)
    throw UserError(m.origin +
                    ": no tokenizer to read texts with (give --tokenizer: a Hugging Face directory with "
                    "spiece.model, or the dataset the model was trained on)");
  std::ifstream in(texts);
  if (!in) throw DataError(texts, "texts", "cannot be read");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") != std::string::npos) lines.push_back(line);
  }
  if (lines.empty()) throw UserError(texts + ": no text lines");
  const int64_t context = m.model->config().context_length;
  const auto device = rt.device();
  return embed_rows(rt, m, lines, context, out, "texts", batch,
                    [&](const std::vector<std::string>& part, at::Tensor& used) {
                      auto tokens = at::empty({int64_t(part.size()), context}, at::kInt);
                      for (size_t i = 0; i < part.size(); ++i)
                        m.tokenizer->encode(part[i], int(context), tokens[int64_t(i)].data_ptr<int32_t>());
                      used = tokens.to(device);
                      return m.model->encode_text(tokens.to(at::kLong).to(device));
                    });
}

HfExport export_siglip(const std::string& checkpoint, const std::string& out, const std::string& dtype,
                       int64_t max_shard_bytes, const std::string& tokenizer) {
  HfExportDir dir(out, dtype);  // checks dtype and out first; removed again on any failure below
  const ModelSource model = open_model(checkpoint, "export");
  const Config& config = model.config;
  const std::string source = tokenizer.empty() ? training_tokenizer(config) : tokenizer;
  if (source.empty())
    throw UserError(checkpoint + ": the tokenizer it was trained with is not here (task.init '" +
                    SiglipSettings::from_config(config).init + "', data.train '" +
                    DataSettings::from_config(config).train +
                    "'): give --tokenizer (a Hugging Face directory or the dataset)");
  LoadedSiglip m = load_siglip(model, source);
  const auto& mc = m.model->config();
  models::NamedTensors tensors;
  for (const auto& item : m.model->named_parameters()) tensors.emplace_back(item.key(), item.value());
  dir.write_weights(std::move(tensors), max_shard_bytes);
  // The tokenizer: a Hugging Face directory's files as they are, else the dataset's model with its rules.
  const auto& tok = *m.tokenizer;
  if (fs::is_directory(source)) {
    for (const char* f : {"spiece.model", "tokenizer_config.json", "special_tokens_map.json"})
      dir.copy_if_there(source, f);
  } else {
    write_file_atomically(dir.file("spiece.model"), tok.model_bytes());
    const nlohmann::json special{
        {"eos_token", tok.piece(tok.eos_id())}, {"pad_token", tok.piece(tok.pad_id())}, {"unk_token", "<unk>"}};
    nlohmann::json tc = special;
    tc["tokenizer_class"] = "SiglipTokenizer";
    tc["model_max_length"] = mc.context_length;
    tc["do_lower_case"] = tok.rules().lower_case;
    dir.write_json("tokenizer_config.json", tc);
    dir.write_json("special_tokens_map.json", special);
  }
  dir.write_json("preprocessor_config.json", {{"image_processor_type", "SiglipImageProcessor"},
                                              {"processor_class", "SiglipProcessor"},
                                              {"do_resize", true},
                                              {"size", {{"height", mc.image_size}, {"width", mc.image_size}}},
                                              {"resample", 3},
                                              {"do_rescale", true},
                                              {"rescale_factor", 1.0 / 255},
                                              {"do_normalize", true},
                                              {"image_mean", {0.5, 0.5, 0.5}},
                                              {"image_std", {0.5, 0.5, 0.5}}});
  dir.write_json("config.json", models::siglip_hf_config(mc, dir.torch_dtype()));
  return dir.commit(source);
}

}  // namespace meridian::tasks
