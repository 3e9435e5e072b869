// SigLIP in and out of Hugging Face's layout (docs/running.md, "Fine-tune a published SigLIP or
// Git-RSCLIP"): a model loaded for inference from a transformers SiglipModel directory or a
// meridian checkpoint (`meridian embed`), and a checkpoint written as a directory that transformers
// loads as SiglipModel (`meridian export`). Training from such a directory is SiglipTask's task.init.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "meridian/data/image_input.h"
#include "meridian/data/tokenizer.h"
#include "meridian/models/siglip.h"
#include "meridian/tasks/hf_export.h"
#include "meridian/tasks/model_source.h"
#include "meridian/tasks/predict.h"

namespace meridian::comm {
class Runtime;
}

namespace meridian::tasks {

struct LoadedSiglip {
  models::Siglip model{nullptr};
  std::optional<data::Tokenizer> tokenizer;  // none when neither the model nor --tokenizer has one
  data::ImageProcessing images;              // preprocessor_config.json's, else SigLIP's at the model's size
  std::string origin;                        // what was loaded, for messages and files
};

// Not collective: the weights of a Hugging Face SiglipModel directory or .safetensors file into
// `model` (models::open_hf_checkpoint, then load_into: every parameter provided, no tensor left over,
// shapes equal; position_ids buffers skipped with a notice when `report`).
void load_hf_weights(models::SiglipImpl& model, const std::string& path, bool report);

// Not collective: the model config of `model` (a siglip checkpoint or a Hugging Face SiglipModel
// directory: its config's model: keys), with a checkpoint's vocabulary as trained (raised to the
// dataset's tokenizer in training).
models::SiglipConfig siglip_config(const ModelSource& model);

// Not collective: a Siglip of config `config` with the weights of `model` (load_hf_weights or the
// checkpoint's by name; `report`: log what was skipped), on the CPU.
models::Siglip siglip_model(const ModelSource& model, const models::SiglipConfig& config, bool report);

// Not collective (every rank reads the files). `model`: a Hugging Face SiglipModel directory
// (config.json, weights, spiece.model, preprocessor_config.json) or a meridian checkpoint (.h5) of
// task siglip (tasks::open_model). `tokenizer`: "" (the directory's spiece.model; for a checkpoint,
// its training data's tokenizer when that file is there), a Hugging Face directory, or a dataset
// made by prep. DataError/UserError naming the file and field for anything missing or malformed.
LoadedSiglip load_siglip(const ModelSource& model, const std::string& tokenizer);

// Collective (a gather, a barrier): `meridian predict` with a siglip model (TaskSpec::predict):
// zero-shot classification of options.images (a directory or one image file, split between the
// ranks) into options.classes, each class embedded with the config's task.prompts
// (class_embeddings). Rank 0 writes the CSV options.out (image,rank,class,probability; the
// options.top_k best classes of each image, best first), whole or not at all. The probability is
// SigLIP's sigmoid(scale x cosine + bias) of each class on its own (task.loss sigmoid), or CLIP's
// softmax over the classes (softmax). UserError for no classes, an empty class name, no images or
// no tokenizer.
PredictSummary predict_siglip(const comm::Runtime& runtime, const ModelSource& model, const PredictOptions& options);

// Collective. The images of `dir` (data::list_images) or the non-empty lines of the UTF-8 file
// `texts`, split between ranks in contiguous shares, embedded `batch` at a time on each rank's
// device, gathered on rank 0, which writes `out` (data/embeddings.h; texts also get /tokens).
// Returns the number embedded (on every rank). UserError for no input or no tokenizer for texts.
int64_t embed_images(const comm::Runtime& rt, LoadedSiglip& model, const std::string& dir, const std::string& out,
                     int64_t batch);
int64_t embed_texts(const comm::Runtime& rt, LoadedSiglip& model, const std::string& texts, const std::string& out,
                    int64_t batch);

// Not collective. Writes the siglip checkpoint `checkpoint` (EMA weights when it has them) as a
// directory transformers loads as SiglipModel: config.json, the weights in `dtype` ("f32" or "bf16")
// as model.safetensors or shards of at most `max_shard_bytes` with model.safetensors.index.json,
// spiece.model, tokenizer_config.json, special_tokens_map.json and preprocessor_config.json.
// `tokenizer` as for load_siglip (default: task.init's directory, else the training dataset).
// Written through HfExportDir (<out>.partial, removed on any failure, renamed at the end), so an
// interrupted export leaves nothing that looks complete. UserError when `out` or <out>.partial exists.
HfExport export_siglip(const std::string& checkpoint, const std::string& out, const std::string& dtype,
                       int64_t max_shard_bytes, const std::string& tokenizer);

}  // namespace meridian::tasks
