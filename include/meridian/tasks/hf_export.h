// A Hugging Face model directory written whole or not at all: what `meridian export` of any task
// shares (tasks::export_siglip, tasks::export_hf_llama). Not collective; one process writes.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "meridian/models/safetensors.h"

namespace meridian::tasks {

// What an export wrote (the CLI prints it).
struct HfExport {
  int64_t tensors = 0, bytes = 0;
  int files = 0;          // weight files (1: model.safetensors; more: shards and the index)
  std::string tokenizer;  // where the tokenizer came from (a directory or a dataset)
  // The line `meridian export` logs: what was written to `out` in `dtype`, and how transformers
  // loads it (`auto_class`.from_pretrained(out)).
  std::string summary(const std::string& dtype, const std::string& out, const std::string& auto_class) const;
};

// Files go into <out>.partial (created empty), renamed to <out> by commit(); destroyed uncommitted
// (any failure on the way), <out>.partial is removed, so nothing half-written is left.
class HfExportDir {
 public:
  // UserError unless dtype is "f32" or "bf16"; when `out` ("dir/" is "dir") or <out>.partial exists
  // (an interrupted export: the user removes it); SystemError when the directory cannot be made.
  HfExportDir(const std::string& out, const std::string& dtype);
  ~HfExportDir();
  HfExportDir(const HfExportDir&) = delete;
  HfExportDir& operator=(const HfExportDir&) = delete;

  // config.json's torch_dtype: "bfloat16" or "float32".
  std::string torch_dtype() const { return dtype_ == at::kBFloat16 ? "bfloat16" : "float32"; }
  // <out>.partial/<name>.
  std::string file(const std::string& name) const;
  // The floating-point tensors in dtype() (integer ones as they are) on the CPU, as models::write_hf_weights
  // (model.safetensors or shards of at most max_shard_bytes with the index); counted in the summary.
  void write_weights(models::NamedTensors tensors, int64_t max_shard_bytes);
  // Copies <from_dir>/<name> in when it exists there; false otherwise.
  bool copy_if_there(const std::string& from_dir, const std::string& name);
  void write_json(const std::string& name, const nlohmann::json& value);
  // Renames <out>.partial to <out>; the summary, its tokenizer set to `tokenizer_source`.
  HfExport commit(const std::string& tokenizer_source);

 private:
  std::string out_, partial_;
  at::ScalarType dtype_;
  HfExport summary_;
  bool committed_ = false;
};

}  // namespace meridian::tasks
