// A model directory as Hugging Face transformers saves one (save_pretrained): config.json, and the
// weights either in model.safetensors or in shards model-0000k-of-0000N.safetensors listed by
// model.safetensors.index.json ({"metadata": {"total_size": bytes}, "weight_map": {tensor: shard}}).
// Model-specific meaning (which config fields, which tensor names) lives with each model.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "meridian/models/safetensors.h"

namespace meridian::models {

struct HfCheckpoint {
  std::string path;         // as given: a directory or one .safetensors file
  std::string config_path;  // <dir>/config.json; "" for a file
  nlohmann::json config;    // config.json's object; null for a file
  LazyTensors tensors;      // every weight (name, shape, stored dtype; read on demand), shards in index order
  std::string weights;      // what the weights were read from, for messages ("<dir>/model.safetensors", "3 shards")
};

// A config key set from config.json: `key` (model.vision.width) to `yaml` (768), read from `field`
// (vision_config.hidden_size, or its transformers default when absent).
struct HfConfigKey {
  std::string key, yaml, field;
};

// Opens `path`: a directory (config.json, then model.safetensors or the index and its shards) or a
// single .safetensors file, reading config.json and every weight file's header, no tensor data
// (each tensor's read() reads its bytes: load_into holds one at a time). Not collective; every rank
// that calls it reads the files. DataError naming
// the file and field when: config.json is missing, unreadable or not an object; neither
// model.safetensors nor the index exists; the index is not {"weight_map": {name: file}}, names a file
// that does not exist or a path outside the directory; a shard lacks a tensor the index puts in it or
// holds one the index does not list there; a tensor appears twice; a shard is damaged (truncated,
// bad header: load_safetensors' checks).
HfCheckpoint open_hf_checkpoint(const std::string& path);

// <dir>/config.json's object; DataError naming the file when it is missing, unreadable or not an object.
nlohmann::json read_hf_config(const std::string& dir);

// Writes `tensors` into the directory `dir` (created; it must not exist or be empty) as transformers
// does: model.safetensors when their total is at most max_shard_bytes, else shards of at most that
// size (a larger tensor alone in its shard), in the given order, with the index. Metadata
// {"format": "pt"} in every file. Files are written whole (safetensors' .tmp + rename); `config` is
// written as config.json last (2-space indent). UserError when `dir` exists and is not empty;
// SystemError naming the path when a write fails. Returns the number of weight files.
int write_hf_weights(const std::string& dir, const NamedTensors& tensors, int64_t max_shard_bytes);

}  // namespace meridian::models
